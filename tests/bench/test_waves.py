"""bench/waves.py: programs an SM holds, against the block limits Nsight Compute reported for the same builds on an
H100 (bench/results/logs/20261207-0350-ncu_int4-*), and the trace parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.waves import Launch, launches, resident, waves

triton = pytest.importorskip("triton")


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


@pytest.mark.skipif(not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists(),
                    reason="this triton wheel ships no ptxas")  # fmt: skip
def test_experts_report_builds_the_packaged_tiles(compiled_child):
    """--experts without a GPU: one row per launch, the programs an SM its sm_90 build allows, the waves."""
    r = compiled_child.run("bench/waves.py", "--experts", "35b", "--tokens", "1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line.replace("<-", "").split() for line in r.stdout.splitlines() if line.startswith(" 1 ")]
    assert [row[1] for row in rows] == ["gate_up", "down"], r.stdout
    for row in rows:
        per_sm, programs, w = int(row[-3]), float(row[-2]), float(row[-1])
        assert per_sm > 0 and w == pytest.approx(programs / (per_sm * 132), abs=0.01)
