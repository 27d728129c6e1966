"""Graceful shutdown of a real `hinfer serve` (demo model): on SIGTERM new and queued requests get a JSON 503
with Retry-After, running streams finish or, after --shutdown-timeout, end with their dialect's error event and
terminator; the process exits 0 and the port is free again."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
from server_proc import serve_process

SHUTDOWN_TIMEOUT_S = 20  # short streams need ~2 s of it on a 2-core machine; long ones need minutes


def _events(text: str) -> list[tuple[str | None, str]]:
    """SSE text -> [(event name or None, data)]."""
    out = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            out.append((name, "\n".join(data)))
    return out


def _chat(max_tokens: int, stream: bool = True) -> tuple[str, dict]:
    return "/v1/chat/completions", {"model": "demo", "stream": stream, "max_tokens": max_tokens, "ignore_eos": True,
                                    "messages": [{"role": "user", "content": "Tell me a story."}]}


def _completion(max_tokens: int) -> tuple[str, dict]:
    return "/v1/completions", {"model": "demo", "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
                               "prompt": "Once upon a time"}


def _messages(max_tokens: int, stream: bool = True) -> tuple[str, dict]:
    return "/v1/messages", {"model": "demo", "stream": stream, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "Tell me a story."}]}


def _responses(max_tokens: int) -> tuple[str, dict]:
    return "/v1/responses", {"model": "demo", "stream": True, "max_output_tokens": max_tokens,
                             "input": "Tell me a story."}


class Client(threading.Thread):
    def __init__(self, url: str, path: str, body: dict):
        super().__init__(daemon=True)
        self.url, self.path, self.body = url, path, body
        self.first = threading.Event()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.text = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + self.path, json=self.body, timeout=120) as r:
                self.status, self.headers = r.status_code, dict(r.headers)
                for chunk in r.iter_text():
                    self.text += chunk
                    self.first.set()
        except BaseException as e:  # recorded and asserted on
            self.error = e
        finally:
            self.first.set()


def _ending(c: Client) -> str:
    """'done' for a normal end, 'cut' for the dialect's shutdown error ending; asserts it is well formed."""
    assert c.error is None and c.status == 200, (c.path, c.error, c.status, c.text[-500:])
    ev = _events(c.text)
    if c.path == "/v1/messages":
        name, data = ev[-1]
        if name == "message_stop":
            return "done"
        assert name == "error" and json.loads(data)["error"]["type"] == "overloaded_error", c.text[-500:]
        return "cut"
    if c.path == "/v1/responses":
        name, data = ev[-1]
        if name in ("response.completed", "response.incomplete"):
            return "done"
        assert name == "response.failed", c.text[-500:]
        assert json.loads(data)["response"]["error"]["code"] == "server_shutting_down"
        return "cut"
    assert ev[-1][1] == "[DONE]", c.text[-500:]
    last = json.loads(ev[-2][1])
    if "error" in last:
        assert last["error"]["code"] == "server_shutting_down" and last["error"]["type"] == "server_error"
        return "cut"
    assert last["choices"][0]["finish_reason"] == "length", last
    return "done"


def _assert_503(c: Client, anthropic: bool) -> None:
    assert c.error is None and c.status == 503, (c.path, c.error, c.status, c.text[-300:])
    assert int(c.headers["retry-after"]) >= 1
    body = json.loads(c.text)
    if anthropic:
        assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    else:
        assert body["error"]["code"] == "server_shutting_down"


def test_sigterm_drains_running_streams_and_refuses_queued_ones(demo_cache):
    args = ["--max-concurrency", "8", "--max-pending-requests", "8", "--max-context", "4096",
            "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)]
    with serve_process(args, demo_cache) as sp:
        url = sp.url
        short = [Client(url, *b(24)) for b in (_chat, _completion, _messages, _responses)]
        long = [Client(url, *b(3000)) for b in (_chat, _completion, _messages, _responses)]
        for c in short + long:
            c.start()
        for c in short + long:
            assert c.first.wait(120), "a stream did not start"
        queued = [Client(url, *_chat(10)), Client(url, *_messages(10, stream=False)), Client(url, *_responses(10))]
        for c in queued:
            c.start()
        deadline = time.monotonic() + 60
        while httpx.get(url + "/health", timeout=10).json()["queue_depth"] < len(queued):
            assert time.monotonic() < deadline, "the extra requests never queued"
            time.sleep(0.05)

        sp.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        late = httpx.post(url + "/v1/messages", json=_messages(5, stream=False)[1], timeout=30)
        health = httpx.get(url + "/health", timeout=30)
        rc = sp.wait_exit(SHUTDOWN_TIMEOUT_S + 60)

    for c in short + long + queued:
        c.join(30)
    assert rc == 0, sp.log
    assert late.status_code == 503 and late.headers["retry-after"] and late.json()["error"]["type"] == "overloaded_error"
    assert health.status_code == 503 and health.json()["status"] == "draining"
    for c in queued:
        _assert_503(c, anthropic=c.path == "/v1/messages")
    assert [_ending(c) for c in short] == ["done"] * 4, sp.log
    endings = [_ending(c) for c in long]
    assert "cut" in endings, endings
    assert "Traceback" not in sp.log, sp.log
    port = urlparse(url).port
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_sigint_on_an_idle_server_exits_0_and_frees_the_port(demo_cache):
    with serve_process(["--max-context", "2048"], demo_cache) as sp:
        port = urlparse(sp.url).port
        assert httpx.get(sp.url + "/health", timeout=30).json()["status"] == "ok"
        sp.proc.send_signal(signal.SIGINT)
        assert sp.wait_exit(60) == 0, sp.log
    assert "Traceback" not in sp.log and "KeyboardInterrupt" not in sp.log, sp.log
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
