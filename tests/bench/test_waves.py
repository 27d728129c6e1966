"""bench/waves.py: programs an SM holds, against the block limits Nsight Compute reported for the same builds on an
H100 (bench/results/logs/20261207-0350-ncu_int4-*), and the trace parsing."""

from __future__ import annotations

import pytest

from bench.waves import Launch, launches, resident, waves


@pytest.mark.parametrize(("regs", "threads", "smem", "want"), [
    (104, 64, 0, 8),  # experts gate_up, eight tokens
    (182, 64, 0, 4),  # experts down, eight tokens
    (72, 64, 0, 14),  # the down on a words ring
    (128, 128, 4, 4),  # experts gate_up, one token, 128-register cap
    (127, 64, 0, 8),  # experts down, one token
    (146, 128, 0, 3),  # 35B-A3B GDN in_proj, one row
    (142, 128, 0, 3),  # 35B-A3B o_proj, one row
    (96, 128, 0, 5),  # 27B gate_up, one row
])  # fmt: skip
def test_resident_matches_nsight_compute(regs, threads, smem, want):
    assert resident(regs, threads, smem) == want


def test_shared_memory_and_warps_limit_too():
    assert resident(32, 128, 100 * 1024) == 2  # 228 KB over 101 KB a program
    assert resident(16, 1024, 0) == 2  # 64 warps an SM
    assert resident(16, 32, 0) == 32  # 32 programs an SM


def test_one_token_gate_up_fits_one_wave_under_96_registers():
    assert waves(Launch("gate_up", 576, 128, 128, 1024), 132) > 1
    assert waves(Launch("gate_up", 576, 128, 96, 1024), 132) <= 1


def test_launches_sums_kernel_events_by_shape():
    ev = {"cat": "kernel", "name": "k", "dur": 2.0,
          "args": {"grid": [4, 2, 1], "block": [64, 1, 1], "registers per thread": 40, "shared memory": 16}}
    trace = {"traceEvents": [ev, dict(ev, dur=3.0), {"cat": "cpu_op", "name": "x", "args": {}}]}
    got = launches(trace)
    assert got == {Launch("k", 8, 64, 40, 16): [5.0, 2]}
