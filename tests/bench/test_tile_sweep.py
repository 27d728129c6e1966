"""bench/tile_sweep.py's spill filter: a sweep times only tiles that compile for sm_90 without spills (a spilling tile
is never packaged), built ahead of time in a fresh process (the `compiled_child` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def _filter() -> None:
    from bench.fp8_mma import candidates
    from bench.tile_sweep import spill_free
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_variant
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    spills = SkinnyConfig(128, 128, 8, 2, 4, 2)  # 96 registers and 8 bytes of stack (2026-12-05)
    clean = SkinnyConfig(64, 128, 8, 1, 4, 4)
    assert spills in candidates(8, 34816, 5120) and clean in candidates(8, 34816, 5120)
    kept = spill_free([spills, clean], lambda c: fp8_mma_variant(c.block_n, c.block_m, c.split_k, c.num_warps, False,
                                                                 c.num_stages, pdl=True), "gate_up M=8")  # fmt: skip
    assert kept == [clean], kept
    print("KEPT", kept)


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton wheel ships no ptxas")
def test_spilling_tiles_are_not_timed(compiled_child):
    r = compiled_child.run("-c", "import runpy; runpy.run_path('tests/bench/test_tile_sweep.py')['_filter']()",
                           timeout=300)  # fmt: skip
    assert r.returncode == 0 and "KEPT" in r.stdout, r.stdout + r.stderr
    assert "spills 8 bytes on sm_90, left out" in r.stdout
