"""Prometheus text exposition, written by hand (a few counters and histograms need no dependency)."""

from __future__ import annotations

import threading
from dataclasses import fields

from hinfer.engine.protocol import EngineStats

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _Histogram:
    def __init__(self, buckets: tuple[float, ...] = _LATENCY_BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # last one: +Inf
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        i = 0
        while i < len(self.buckets) and v > self.buckets[i]:
            i += 1
        self.counts[i] += 1
        self.total += v
        self.n += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        out = []
        acc = 0
        sep = "," if labels else ""
        for b, c in zip(self.buckets, self.counts):
            acc += c
            out.append(f'{name}_bucket{{{labels}{sep}le="{b}"}} {acc}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        lab = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{lab} {self.total:.6f}")
        out.append(f"{name}_count{lab} {self.n}")
        return out


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Server-side counters; engine gauges are read from `engine.stats()` at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}  # (endpoint, status) -> count
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.in_flight = 0
        self.aborted = 0
        self.ttft = _Histogram()
        self.e2e = _Histogram()
        self.queue = _Histogram()

    def request_done(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, status)
            self.requests[key] = self.requests.get(key, 0) + 1

    def generation_done(self, *, prompt_tokens: int, completion_tokens: int, e2e_s: float,
                        ttft_s: float | None, queue_s: float | None, aborted: bool) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.e2e.observe(e2e_s)
            if ttft_s is not None:
                self.ttft.observe(ttft_s)
            if queue_s is not None:
                self.queue.observe(queue_s)
            self.aborted += int(aborted)

    def render(self, stats: EngineStats | None, model: str, batches: dict[str, tuple[int, int]] | None = None) -> str:
        """The Prometheus text; `batches`: per batch API, (batches running, their requests not answered yet)."""
        m = f'model="{_escape(model)}"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[str]) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(samples)

        with self._lock:
            metric("hinfer_requests_total", "counter", "HTTP requests answered, by endpoint and status.",
                   [f'hinfer_requests_total{{{m},endpoint="{_escape(e)}",status="{s}"}} {n}'
                    for (e, s), n in sorted(self.requests.items())])
            metric("hinfer_prompt_tokens_total", "counter", "Prompt tokens of generation requests.",
                   [f"hinfer_prompt_tokens_total{{{m}}} {self.prompt_tokens}"])
            metric("hinfer_completion_tokens_total", "counter", "Tokens generated.",
                   [f"hinfer_completion_tokens_total{{{m}}} {self.completion_tokens}"])
            metric("hinfer_requests_in_flight", "gauge", "Generation requests being answered now.",
                   [f"hinfer_requests_in_flight{{{m}}} {self.in_flight}"])
            metric("hinfer_requests_aborted_total", "counter", "Generations stopped because the client left.",
                   [f"hinfer_requests_aborted_total{{{m}}} {self.aborted}"])
            metric("hinfer_time_to_first_token_seconds", "histogram", "Request arrival to first token.",
                   self.ttft.lines("hinfer_time_to_first_token_seconds", m))
            metric("hinfer_request_latency_seconds", "histogram", "Request arrival to last token.",
                   self.e2e.lines("hinfer_request_latency_seconds", m))
            metric("hinfer_queue_time_seconds", "histogram", "Time waiting for a lane (engine timings).",
                   self.queue.lines("hinfer_queue_time_seconds", m))
        if batches:
            metric("hinfer_batches_running", "gauge", "Batches running, by API (OpenAI Batches, Anthropic Message Batches).",
                   [f'hinfer_batches_running{{{m},api="{a}"}} {n}' for a, (n, _) in sorted(batches.items())])
            metric("hinfer_batch_requests_waiting", "gauge", "Requests of running batches not answered yet, by API.",
                   [f'hinfer_batch_requests_waiting{{{m},api="{a}"}} {w}' for a, (_, w) in sorted(batches.items())])
        if stats is not None:
            help_ = {
                "lanes_total": "Decode lanes (--max-concurrency).",
                "lanes_busy": "Lanes running a request.",
                "queue_depth": "Requests waiting for a lane.",
                "pages_total": "KV pages in the pool.",
                "pages_free": "KV pages free.",
                "slots_total": "GDN state slots in the pool.",
                "slots_free": "GDN state slots free.",
                "requests_finished": "Requests the engine finished.",
                "tokens_generated": "Tokens the engine generated.",
                "prompt_tokens": "Prompt tokens the engine processed.",
            }
            for f in fields(EngineStats):
                if f.name in ("extra", "broken"):
                    continue
                kind = "counter" if f.name in ("requests_finished", "tokens_generated", "prompt_tokens") else "gauge"
                name = f"hinfer_engine_{f.name}" + ("_total" if kind == "counter" else "")
                metric(name, kind, help_.get(f.name, f.name), [f"{name}{{{m}}} {getattr(stats, f.name)}"])
            name = "hinfer_engine_broken"  # alert on it: no request can be served until the server restarts
            metric(name, "gauge", "1 once the engine can run no step any more (a tensor-parallel rank gone).",
                   [f"{name}{{{m}}} {int(stats.broken is not None)}"])
            for k, v in sorted(stats.extra.items()):
                key = "".join(c if c.isalnum() else "_" for c in k)
                name = f"hinfer_engine_{key}"
                metric(name, "gauge", f"Engine figure {k}.", [f"{name}{{{m}}} {float(v)}"])
        return "\n".join(lines) + "\n"
