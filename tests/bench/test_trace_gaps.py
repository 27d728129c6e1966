"""bench/trace_gaps.py on a hand-made trace: each GPU gap is charged to the Python frames around the launch of
the activity that ends it, overlapping activities leave no gap, and the table sums them per unit."""

from __future__ import annotations

import gzip
import json
import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "trace_gaps.py"


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, corr: int | None = None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def _trace() -> list[dict]:
    """Host: step() runs 0-1000 us; verify launched at 10, a copy at 50 (under _stage), draft at 700.
    GPU: verify 20-300, the copy 310-320 (a 10 us gap), a kernel 315-400 overlapping it, draft 900-950 (500 us)."""
    return [
        _x("python_function", "hinfer/engine/spec/decoder.py(180): step", 0, 1000),
        _x("python_function", "hinfer/engine/cuda_graphs.py(131): _stage", 40, 20),
        _x("python_function", "torch/nn/modules/module.py(1): _call_impl", 45, 10),
        _x("python_function", "hinfer/engine/spec/mtp.py(100): draft", 650, 300),
        _x("cuda_runtime", "cudaGraphLaunch", 10, 5, corr=1),
        _x("cuda_runtime", "cudaMemcpyAsync", 50, 2, corr=2),
        _x("cuda_runtime", "cudaLaunchKernel", 55, 2, corr=3),
        _x("cuda_runtime", "cudaLaunchKernel", 700, 3, corr=4),
        _x("kernel", "verify_kernel", 20, 280, tid=7, corr=1),
        _x("gpu_memcpy", "Memcpy HtoD", 310, 10, tid=7, corr=2),
        _x("kernel", "overlapping_kernel", 315, 85, tid=8, corr=3),
        _x("kernel", "draft_kernel", 900, 50, tid=7, corr=4),
    ]


def test_gaps_are_charged_to_the_frames_that_launched_what_ends_them(tmp_path):
    tg = runpy.run_path(str(SCRIPT))
    found = tg["gaps"](_trace(), min_us=5.0, keep=3)
    assert [round(g.us) for g in found] == [10, 500]
    first, second = found
    assert (first.after, first.before, first.launch) == ("verify_kernel", "Memcpy HtoD", "cudaMemcpyAsync")
    # torch's frame is not ours: the innermost project frame is _stage, under step
    assert first.frames == ("hinfer/engine/spec/decoder.py(180): step", "hinfer/engine/cuda_graphs.py(131): _stage")
    assert second.after == "overlapping_kernel" and second.frames[-1] == "hinfer/engine/spec/mtp.py(100): draft"
    table = tg["table"](found, units=2, unit="round")
    assert table.splitlines()[0] == "GPU idle 0.255 ms per round in 1.0 gaps"
    assert "mtp.py(100): draft" in table.splitlines()[2] and "250.0" in table.splitlines()[2]

    path = tmp_path / "t.json.gz"  # the loader reads what profile_decode.py --trace writes
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": _trace()}, f)
    assert len(tg["load"](str(path))) == len(_trace())
