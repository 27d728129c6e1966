"""The device probes of bench/launch_boundary.py and bench/l2_prefetch.py go through Triton's sm_90 pipeline with
what they measure intact: the persistent walk's barrier polls by volatile loads and then acquires (an atomic whose
result went unused would be dropped, its ordering with it; an acquiring add of 0 compiles to a load-acquire), or
polls by load-acquires, and releases its count once a GEMV; the busy kernel
reads the global timer and issues L2 prefetches by lines or by bulk copies only in those modes. In a child
process (the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


def test_probes_compile_with_their_waits_and_prefetches(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    got = {}
    for line in res.stdout.splitlines():
        if line.startswith("compiled "):
            name, *items = line.split()[1:]
            got[name] = {k: int(v) for k, v in (item.split("=") for item in items)}
    walk = got["walk"]
    assert walk["volatile"] >= 2 and walk["acquire"] >= 1 and walk["release"] >= 1, walk
    assert got["walk_atomic"]["volatile"] == 0 and got["walk_atomic"]["acquire"] >= 1, got["walk_atomic"]
    assert got["busy0"]["timer"] >= 1 and got["busy0"]["lines"] == got["busy0"]["bulk"] == 0, got["busy0"]
    assert got["busy1"]["lines"] >= 3 and got["busy1"]["bulk"] == 0, got["busy1"]  # one per tensor at least
    assert got["busy2"]["bulk"] >= 3 and got["busy2"]["lines"] == 0, got["busy2"]


def _compile() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.l2_prefetch import _busy_kernel
    from bench.launch_boundary import _chain_kernel
    from hinfer.ops.triton.linear_aot import compile_sm90

    sig = {"w_ptr": "*bf16", "buf_ptr": "*bf16", "cnt_ptr": "*i32", "phases": "i32"}
    for name, atomic in (("walk", False), ("walk_atomic", True)):
        k = compile_sm90(_chain_kernel, sig, {"D": 1024, "BN": 16, "BK": 128, "BARRIER": True, "PREFETCH": True,
                                              "ATOMIC_POLL": atomic}, 4, 3)  # fmt: skip
        ptx = k.asm["ptx"]
        print(f"compiled {name} volatile={ptx.count('ld.volatile.global')} acquire={ptx.count('.gpu.acquire')} "
              f"release={ptx.count('.gpu.release')}")  # fmt: skip
    sig = {"a_ptr": "*u8", "a_bytes": "i64", "b_ptr": "*u8", "b_bytes": "i64", "c_ptr": "*u8", "c_bytes": "i64",
           "busy_ns": "i64"}  # fmt: skip
    for mode in (0, 1, 2):
        ptx = compile_sm90(_busy_kernel, sig, {"MODE": mode, "LINES": 8, "PDL": True}, 4, 1).asm["ptx"]
        print(f"compiled busy{mode} timer={ptx.count('%globaltimer')} lines={ptx.count('prefetch.global.L2')} "
              f"bulk={ptx.count('cp.async.bulk.prefetch.L2')}")  # fmt: skip
