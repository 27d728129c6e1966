"""Where a speculative round's time goes, without a profiler: CUDA events recorded on the stream between its
parts split the GPU's time (verification, the drafter's pass over the verified rows, its draft steps, and the gap
until the next verification starts), and the host's clock splits its own (work before it waits for the
acceptance, the wait, work after it until the next verification is launched).

    python bench/spec_timeline.py [--config qwen3.6-27b] [--quant int4] [--spec-k 3] [--lanes 1] [--rounds 48]

An event's time is when the GPU reaches it in stream order, so `gap` (last draft step's end to the next
verification's start) is the time the GPU spent waiting for the host, uploads included. If the host's work after
the wait is longer than the drafter's GPU work queued behind verification, the round is the host's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from hinfer.bench import measure
from hinfer.engine.spec import decoder as dec
from hinfer.engine.spec import drafter as dr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.profile_decode


class _HostEvent:
    """A CUDA event's stand-in on the CPU (the tests' runs): the host's clock, since every op has run by then."""

    def __init__(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: _HostEvent) -> float:
        return (other.t - self.t) * 1e3


class Timeline:
    """Events and host clocks of the rounds, keyed by the point they mark."""

    def __init__(self, cuda: bool = True) -> None:
        self.cuda = cuda
        self.rounds: list[dict[str, object]] = []
        self.cur: dict[str, object] = {}

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
        else:
            ev = _HostEvent()
        self.cur[name] = ev
        self.cur["h_" + name] = time.perf_counter()

    def host(self, name: str, dt: float) -> None:
        self.cur[name] = float(self.cur.get(name, 0.0)) + dt

    def next_round(self) -> None:
        if self.cur:
            self.rounds.append(self.cur)
        self.cur = {}


@contextmanager
def instrument(tl: Timeline) -> Iterator[None]:
    """The decoder's and the drafts' methods wrapped to mark the timeline, restored on exit."""
    real = (dec.SpecDecoder._target_forward, dec.SpecDecoder._early_draft_pass, dec.SpecDecoder.after_step,
            dr.DeviceDrafts.row, dec.SpecDecoder.step)  # fmt: skip
    real_fwd, real_early, real_after, real_row, real_step = real

    def step(self, chunks):
        tl.next_round()
        tl.cur["h_start"] = time.perf_counter()
        return real_step(self, chunks)

    def fwd(self, *a, **k):
        tl.mark("verify_launch")
        out = real_fwd(self, *a, **k)
        tl.mark("verify_end")
        return out

    def early(self, *a, **k):
        out = real_early(self, *a, **k)
        tl.mark("pass_end")
        return out

    def after(self):
        tl.cur["h_after"] = time.perf_counter()
        real_after(self)
        tl.mark("drafts_end")

    def row(self, r, n):
        t0 = time.perf_counter()
        out = real_row(self, r, n)
        tl.host("wait", time.perf_counter() - t0)
        tl.cur.setdefault("h_wait", t0)  # the round's first read of device tokens: the acceptance
        tl.cur.setdefault("h_woke", time.perf_counter())
        return out

    dec.SpecDecoder._target_forward, dec.SpecDecoder._early_draft_pass = fwd, early
    dec.SpecDecoder.after_step, dr.DeviceDrafts.row, dec.SpecDecoder.step = after, row, step
    try:
        yield
    finally:
        (dec.SpecDecoder._target_forward, dec.SpecDecoder._early_draft_pass, dec.SpecDecoder.after_step,
         dr.DeviceDrafts.row, dec.SpecDecoder.step) = real  # fmt: skip


def report(tl: Timeline) -> dict[str, float]:
    rs = [r for r in tl.rounds if "drafts_end" in r and "pass_end" in r]
    out: dict[str, list[float]] = {}

    def add(k: str, v: float) -> None:
        out.setdefault(k, []).append(v)

    for a, b in zip(rs, rs[1:]):
        add("gpu: verification", a["verify_launch"].elapsed_time(a["verify_end"]))
        add("gpu: pass over the verified rows", a["verify_end"].elapsed_time(a["pass_end"]))
        add("gpu: draft steps (and waits inside)", a["pass_end"].elapsed_time(a["drafts_end"]))
        add("gpu: gap to next verification", a["drafts_end"].elapsed_time(b["verify_launch"]))
        add("round (verification to verification)", a["verify_launch"].elapsed_time(b["verify_launch"]))
        add("host: before the wait", 1e3 * (a.get("h_wait", a["h_after"]) - a["h_start"]))
        add("host: waiting for device tokens", 1e3 * float(a.get("wait", 0.0)))
        add("host: after the wait to next verification launch", 1e3 * (b["h_verify_launch"] - a.get("h_woke", a["h_after"])))
        add("host: after_step (drafter)", 1e3 * (a["h_drafts_end"] - a["h_after"]))
    return {k: statistics.median(v) for k, v in out.items()}


def timeline(core, lanes: int, depth: int, rounds: int) -> dict[str, float]:
    """Medians of the parts of `rounds` speculative rounds (measure.spec_rounds), instrumented. On the CPU the GPU
    lines are host time (every op has run when the host marks it)."""
    tl = Timeline(cuda=core.runner.device.type == "cuda")
    with instrument(tl):
        measure.spec_rounds(core, lanes, depth, rounds=rounds)
    tl.next_round()
    return report(tl)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="qwen3.6-27b")
    ap.add_argument("--quant", default="int4")
    ap.add_argument("--spec-k", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=1)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=48)
    a = ap.parse_args()
    from bench.profile_decode import decode_core

    _, _, core = decode_core(a.config, a.quant, a.lanes, a.depth, a.layers, a.spec_k, room=256 + 64 * (a.spec_k + 1))
    plain = measure.decode(core.runner, a.lanes, a.depth, steps=32)
    t = measure.spec_rounds(core, a.lanes, a.depth, rounds=a.rounds)
    parts = timeline(core, a.lanes, a.depth, a.rounds)
    print(f"{a.config} {a.quant} K={a.spec_k} lanes={a.lanes}: round {t.ms_per_round:.3f} ms "
          f"({parts['round (verification to verification)']:.3f} instrumented), plain step {plain.ms_per_step:.3f} ms "
          f"({t.ms_per_round / plain.ms_per_step:.2f}x)")  # fmt: skip
    for k, v in parts.items():
        print(f"  {k:<52} {v:7.3f} ms")


if __name__ == "__main__":
    main()
