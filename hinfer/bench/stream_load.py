"""A steady streaming load on a live server: N client threads, each sending the same chat completion again
and again (stream on, fixed prompt, max_tokens, ignore_eos so every answer has the same length), plus the few
plain HTTP calls the serving benchmarks need. Standard library only: the benchmark runs where the test extras
are not installed.

Stopping closes each client's connection mid-answer; the server aborts those requests and frees their lanes.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$")


def _conn(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout_s)
    return conn, u.path or "/"


def get_text(url: str, timeout_s: float = 30.0) -> str:
    conn, path = _conn(url, timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode()
        if resp.status != 200:
            raise OSError(f"GET {url}: HTTP {resp.status}: {body[:200]}")
        return body
    finally:
        conn.close()


def get_json(url: str, timeout_s: float = 30.0) -> dict:
    return json.loads(get_text(url, timeout_s))


def post_json(url: str, body: dict, timeout_s: float = 600.0) -> dict:
    conn, path = _conn(url, timeout_s)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        if resp.status != 200:
            raise OSError(f"POST {url}: HTTP {resp.status}: {text[:300]}")
        return json.loads(text)
    finally:
        conn.close()


def metrics(base_url: str) -> dict[str, float]:
    return parse_metrics(get_text(base_url + "/metrics"))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus samples that carry one label at most (the model: engine counters and gauges), by name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and (m.group(2) or "").count("=") <= 1:
            out[m.group(1)] = float(m.group(3))
    return out


@dataclass
class ClientCounts:
    requests_done: int = 0  # answers read to their end
    completion_tokens: int = 0  # of those answers (their usage)
    errors: int = 0  # answers that were not 200 or broke off while the load ran
    last_error: str = ""


class StreamClients:
    """`n` threads, client i sending prompts[i % len(prompts)] as streaming chat completions, back to back."""

    def __init__(self, base_url: str, model: str, prompts: list[str], max_tokens: int, n: int,
                 timeout_s: float = 120.0) -> None:  # fmt: skip
        self.url = base_url + "/v1/chat/completions"
        self.bodies = [{"model": model, "messages": [{"role": "user", "content": prompts[i % len(prompts)]}],
                        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True}} for i in range(n)]  # fmt: skip
        self.timeout_s = timeout_s
        self.counts = [ClientCounts() for _ in range(n)]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(n)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def fewest_answers(self) -> int:
        """Answers read to their end by the client that has read the fewest."""
        return min(c.requests_done for c in self.counts)

    def stop(self) -> ClientCounts:
        """Ends the load (open answers are cut off) and -> the clients' counts summed."""
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s)
        total = ClientCounts()
        for c in self.counts:
            total.requests_done += c.requests_done
            total.completion_tokens += c.completion_tokens
            total.errors += c.errors
            total.last_error = c.last_error or total.last_error
        return total

    def _client(self, i: int) -> None:
        counts, body = self.counts[i], json.dumps(self.bodies[i])
        while not self._stop.is_set():
            conn, path = _conn(self.url, self.timeout_s)
            try:
                tokens = self._one(conn, path, body)
                if tokens is not None:
                    counts.requests_done += 1
                    counts.completion_tokens += tokens
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self._stop.is_set():
                    counts.errors += 1
                    counts.last_error = f"{type(e).__name__}: {e}"
            finally:
                conn.close()

    def _one(self, conn: http.client.HTTPConnection, path: str, body: str) -> int | None:
        """One streamed answer; -> its completion tokens, or None when the load stopped first."""
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}: {resp.read().decode()[:300]}")
        tokens = 0
        while not self._stop.is_set():
            line = resp.readline()
            if not line:
                raise OSError("the stream ended without [DONE]")
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                return tokens
            event = json.loads(data)
            if "error" in event:
                raise OSError(f"error event: {event['error']}")
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
        return None
