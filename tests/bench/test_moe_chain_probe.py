"""bench/moe_chain_probe.py's arithmetic on the CPU: a launch's stamps (each program's SM clock at six points and
the global timer at entry and end, at the magnitudes the GPU writes: nanoseconds since the epoch pass what a
double holds exactly) become each program's times from the launch's first entry, programs that never reached the
last stamp left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.moe_chain_probe import LAST, POINTS, STAMPS, stats, timeline  # noqa: E402


def test_stamps_become_times_from_the_first_entry():
    epoch_ns = 1_733_400_000_000_000_123  # about 2024 in ns: a double's spacing there is 256 ns
    offsets = [0, 100, 300, 2000, 2500, 2600]  # cycles after a program's entry; the clock runs at 2 cycles / ns
    p = torch.zeros(12, STAMPS, dtype=torch.int64)
    for i in range(10):  # programs entering 100 ns apart, each its own SM clock origin
        c0 = 10**12 + 7919 * i
        p[i, : LAST + 1] = torch.tensor([c0 + o for o in offsets])
        p[i, LAST + 1] = epoch_ns + 100 * i
        p[i, LAST + 2] = epoch_ns + 100 * i + offsets[-1] // 2
    p[10, :3] = 5  # a program that stopped early: left out; row 11 never ran
    t = timeline(p)
    assert len(t["entry"]) == 10
    for name, o in zip(POINTS, offsets):
        med, p90, last = stats(t[name])
        assert (med, last) == pytest.approx(((500 + o / 2) / 1e3, (900 + o / 2) / 1e3), abs=1e-9), name
    assert t["_end"] - t["_start"] == 900 + offsets[-1] // 2
