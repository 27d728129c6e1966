"""The int4 experts' ring with x in it (the tile's ring_x, hinfer.ops.triton.moe_int4_mma._k_loop_ring_x): the
tiles it accepts, and its sm_90 build (a child process: the `compiled_child` fixture) at the 35B-A3B's eight-token
gate_up and down tiles: no global load left in the group loop (x and the words by cp.async, the scales from
shared memory), no spills. The same bits as the register look-ahead is a GPU test
(tests/gpu/test_moe_kernels.py::test_experts_int4_words_ring)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from hinfer.ops.triton.moe_int4 import Int4Experts  # noqa: E402
from hinfer.ops.triton.moe_int4_mma import experts_mma  # noqa: E402
from hinfer.ops.triton.tiles.forms import SkinnyConfig  # noqa: E402


@pytest.mark.parametrize("tile", [SkinnyConfig(64, 128, 8, 1, 2, 4, 0, ring_x=True),
                                  SkinnyConfig(64, 128, 8, 1, 2, 4, 4, ring_x=True, x_staged=True),
                                  SkinnyConfig(64, 128, 8, 1, 2, 4, 4, ring_x=True, x_ahead=True)])  # fmt: skip
def test_ring_x_needs_a_ring_and_x_in_it(tile):
    w = Int4Experts(torch.zeros(2, 64, 16, dtype=torch.int32), torch.ones(2, 64, 1, dtype=torch.bfloat16), None, 128)
    ids = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="x in the ring only"):
        experts_mma(torch.ones(1, 128, dtype=torch.bfloat16), w, torch.empty(1, 64, dtype=torch.bfloat16), 1, 8,
                    ids, ids, ids, ids, True, 1, cfg=tile)  # fmt: skip


def test_ring_x_builds_without_global_loads_in_its_loop(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [dict(item.split("=") for item in v.split()[2:]) for v in res.stdout.splitlines() if v.startswith("tile")]
    assert len(lines) == 4, res.stdout
    for f in lines:
        assert f["stack"] == "0" and f["loop_ldg"] == "0", f
        assert int(f["loop_ldgsts"]) >= 2 and int(f["loop_hmma"]) >= 8, f  # words and x copied; the MMAs


def _compile() -> None:
    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_loops, sass_of
    from hinfer.ops.triton.moe_int4_mma import experts_mma_variant

    cases = {  # the 35B-A3B's eight-token gate_up (2,048 x 1,024, 16 groups) and down (512 x 2,048, 4 groups)
        "gate_up": experts_mma_variant(32, 8, 2, True, False, 9, False, pdl=True, act=True, ring=6, gp=16),
        "gate_up_sym": experts_mma_variant(64, 8, 4, False, False, 9, False, pdl=True, act=True, ring=4, gp=16),
        "down": experts_mma_variant(128, 8, 2, True, False, 1, False, pdl=True, ring=4, gp=4),
        "down_split": experts_mma_variant(64, 8, 2, True, False, 1, False, pdl=True, split=2, ring=3, gp=2),
    }
    for name, (_, fn, sig, cex, warps) in cases.items():
        k = compile_gluon_sm90(fn, sig, cex, warps)
        r = resources(k)
        loop = max(sass_loops(sass_of(k)), key=lambda c: c["HMMA"])
        print(f"tile {name} stack={r['stack']} smem={r['smem']} regs={r['regs']} loop_ldg={loop['LDG']} "
              f"loop_ldgsts={loop['LDGSTS']} loop_hmma={loop['HMMA']}")  # fmt: skip
