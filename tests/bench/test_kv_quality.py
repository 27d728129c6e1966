"""bench/kv_quality.py at toy sizes: the rows and tables come out, and the orderings the docs state hold (int8
closer than fp8 where a few keys dominate; int4, rotated keys included, as close as its values allow; every
format far from O(1) error), on random and real-text prompts."""

from __future__ import annotations

import runpy
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kv_quality.py"


def test_kv_quality_smoke():
    kq = runpy.run_path(str(SCRIPT))
    torch.set_num_threads(1)
    att = kq["attention_rows"]([1024], 1, 0, q8=True)
    err = {(r["queries"], r["format"]): r["rel_err"] for r in att}
    assert len(err) == 12 and all(0 < e < 0.5 for e in err.values()), err
    # int8-rounded queries add little to what int8 keys already cost (k8v4: its 4-bit values dominate)
    assert err[("focused", "int8 q8")] < 1.5 * err[("focused", "int8")], err
    assert err[("focused", "k8v4 q8")] < 1.1 * err[("focused", "k8v4")], err
    assert err[("focused", "int8")] < err[("focused", "fp8")]
    # keys that were not rotated back (or queries not rotated) would give O(1) here
    assert err[("focused", "int4")] < 1.5 * err[("focused", "k8v4")], err
    mod = kq["model_rows"](1, 64, 0)
    assert {r["format"] for r in mod} == {"fp32", "fp8", "int8", "k8v4", "int4"}
    assert {r["prompt"] for r in mod} == {"random", "text"}
    # top-1 over the toy prompt's 16 last-quarter positions flips on near-ties as the CPU kernels' summation order
    # moves with memory layout (0.875-1.0 seen for int4 at KL ~2e-5): the bound leaves four of them
    assert all(r["mean_kl"] < 1e-2 and r["top1"] >= 0.75 for r in mod), mod
    table = kq["tables"](att, mod)
    assert "| 1,024 | focused |" in table and "| text | int4 | last quarter |" in table and "k8v4 q8" in table
