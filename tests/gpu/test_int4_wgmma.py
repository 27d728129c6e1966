"""The Gluon int4 warpgroup-MMA kernel (hinfer/ops/triton/linear_int4_wgmma.py) at the Qwen3.6-27B shapes against
x @ Int4MmaWeight.dequantize(bf16)^T in fp32: the kernel multiplies the same bf16 products (round((u - z) s)), so
only the fp32 summation order and the output's bf16 rounding differ (relative L2 <= 4e-3). NaN-poisoned outputs,
K splits, rows of x past a block, a CUDA graph.

    pytest -m gpu tests/gpu/test_int4_wgmma.py -q
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H = 5120
SHAPES = {"qkv": (14336, H), "gate_up": (34816, H), "o_proj": (H, 6144), "down": (H, 17408)}
REL = 4e-3


def _gen() -> torch.Generator:
    from hinfer.fixtures import fixed_test_seed

    return torch.Generator(device="cuda").manual_seed(fixed_test_seed())


def _weight(n: int, k: int, zero_point: bool, g: torch.Generator):
    from hinfer.quant import quantize_int4
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    w = (torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    return Int4MmaWeight.from_int4(quantize_int4(w, zero_point=zero_point))


def _rel(y: torch.Tensor, x: torch.Tensor, mw) -> float:
    assert torch.isfinite(y).all(), "non-finite (or unwritten) output"
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = x.float() @ mw.dequantize(torch.bfloat16).float().t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return ((y.float() - ref).norm() / ref.norm()).item()


def _poisoned(m: int, n: int) -> torch.Tensor:
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_int4_wgmma_27b_shapes(name, zero_point):
    """The default tile at 1-64 rows of x (one row: a block of 8 with seven re-read rows)."""
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul

    n, k = SHAPES[name]
    g = _gen()
    mw = _weight(n, k, zero_point, g)
    for m in (1, 8, 13, 32, 64):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_wgmma_matmul(x, mw, out=_poisoned(m, n))
        rel = _rel(y, x, mw)
        print(f"  {name} M={m}: rel L2 {rel:.2e}")
        assert rel < REL, f"{name} M={m}"


@pytest.mark.parametrize("tile", [(64, 8, 1, 4), (128, 16, 2, 4), (128, 32, 4, 8), (256, 32, 1, 8), (64, 64, 2, 4),
                                  (128, 16, 1, 8), (256, 8, 4, 8), (128, 8, 2, 8), (128, 32, 2, 8),
                                  # x copied 1-4 groups at a time (the qkv's 40 groups: slices of 40, 20, 10)
                                  (128, 32, 1, 8, 4), (64, 8, 2, 4, 2), (128, 16, 4, 4, 1), (256, 64, 1, 8, 2),
                                  (128, 32, 2, 8, 4),
                                  # registers capped (maxnreg)
                                  (128, 32, 2, 8, 1, 80), (64, 32, 1, 4, 0, 96)])  # fmt: skip
def test_int4_wgmma_tiles(tile):
    """Given tiles: BLOCK_N (one or more warpgroups, repeated), rows of x in one or several blocks, K splits
    reduced by the last program (the arrival counters left zeroed), x through registers or a cp.async ring,
    in a CUDA graph too."""
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
    from hinfer.ops.triton.linear_splitk import counter_buffer
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, ring, regs = (*tile, 0, 0)[:6]
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, 1, ring, max_regs=regs)
    n, k = SHAPES["qkv"]
    g = _gen()
    mw = _weight(n, k, True, g)
    for m in sorted({1, block_m // 2 + 1, block_m, min(2 * block_m + 3, 64)}):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_wgmma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
        assert _rel(y, x, mw) < REL, f"M={m} {cfg}"
    assert not counter_buffer(x.device).any(), "an arrival counter is left set"
    x = torch.randn(block_m, k, generator=g, device="cuda").bfloat16()
    want = int4_wgmma_matmul(x, mw, cfg=cfg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_g = int4_wgmma_matmul(x, mw, cfg=cfg)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_g, want), "graph replay differs"


@pytest.mark.parametrize("name", ["o_proj", "down"])
def test_int4_wgmma_x_ring_at_other_slices(name):
    """The cp.async ring of x where the slices' groups halve its chunks (o_proj's 48 groups in 4: 12 each,
    chunks of 2; down's 136 in 4: 34, chunks of 1) or leave x in registers (down in 8: 17)."""
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    n, k = SHAPES[name]
    g = _gen()
    mw = _weight(n, k, True, g)
    for split in (1, 4, 8):
        cfg = SkinnyConfig(128, 128, 32, split, 8, 1, 4)
        for m in (5, 32):
            x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
            y = int4_wgmma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
            assert _rel(y, x, mw) < REL, f"{name} M={m} {cfg}"


@pytest.mark.parametrize("tile", [(128, 32, 1, 8, 4), (64, 32, 1, 4, 2), (128, 16, 2, 8, 4), (256, 8, 4, 8, 2),
                                  (64, 64, 2, 4, 4), (128, 32, 2, 4, 2, 128)])  # fmt: skip
@pytest.mark.parametrize("name", list(SHAPES))
def test_int4_wgmma_async_is_the_waited_kernel_bit_for_bit(name, tile):
    """One MMA left in flight while the next group unpacks: the same MMAs into the same accumulator in the same
    order, so the output is the waited kernel's to the bit (and close to the reference), in a CUDA graph too."""
    from dataclasses import replace

    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, ring, regs = (*tile, 0)[:6]
    waited = SkinnyConfig(block_n, 128, block_m, split, warps, 1, ring, max_regs=regs)
    in_flight = replace(waited, async_mma=True)
    n, k = SHAPES[name]
    g = _gen()
    mw = _weight(n, k, True, g)
    for m in sorted({1, block_m // 2 + 1, block_m, min(2 * block_m + 3, 64)}):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_wgmma_matmul(x, mw, out=_poisoned(m, n), cfg=in_flight)
        assert torch.equal(y, int4_wgmma_matmul(x, mw, cfg=waited)), f"{name} M={m} {in_flight}"
        assert _rel(y, x, mw) < REL, f"{name} M={m} {in_flight}"
    x = torch.randn(block_m, k, generator=g, device="cuda").bfloat16()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_g = int4_wgmma_matmul(x, mw, cfg=in_flight)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_g, int4_wgmma_matmul(x, mw, cfg=waited)), "graph replay differs"


def test_int4_wgmma_bad_tiles_are_refused():
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    mw = _weight(*SHAPES["o_proj"], True, _gen())
    x = torch.randn(4, SHAPES["o_proj"][1], device="cuda").bfloat16()
    for cfg in (SkinnyConfig(96, 128, 8, 1, 4, 1), SkinnyConfig(64, 128, 8, 1, 2, 1), SkinnyConfig(64, 128, 12, 1, 4, 1),
                SkinnyConfig(64, 128, 8, 1, 4, 2)):
        with pytest.raises(ValueError, match="bad tile"):
            int4_wgmma_matmul(x, mw, cfg=cfg)
