"""The Gluon int4 x int8 decode kernel (hinfer/ops/triton/linear_int4_a8.py; HINFER_INT4_DECODE=a8) against its
twin, hinfer.quant.int4_mma_layout.emulate_kernel_a8 (on the CPU: exact integer sums), and at the Qwen3.6-27B
shapes against Int4Weight.matmul_ref_a8; NaN-poisoned outputs.

    pytest -m gpu tests/gpu/test_int4_a8.py -q
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_int4_mma import SHAPES, _fp32_references, _gen, _poisoned, _quantized, _rel  # noqa: F401

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H = 5120
# the kernel and matmul_ref_a8 quantize x alike (one rounding a value); what remains is fp32 summation order
# and the bf16 output rounding (relative 2^-9 a value)
REL = 4e-3


@pytest.mark.parametrize("tile", [(128, 1, 4, 4), (128, 4, 4, 4), (128, 3, 8, 2), (256, 2, 8, 3), (64, 5, 4, 6),
                                  (128, 16, 4, 4), (128, 8, 8, 4)])  # fmt: skip
@pytest.mark.parametrize("ahead", [False, True], ids=["prologue", "x-ahead"])
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_a8_matches_its_twin(tile, zero_point, ahead):
    """Tiles (BLOCK_N, split-K, warps, ring) on 40 groups (uneven splits, splits of 2 and 3 groups, a ring longer
    than a split), 1 to 8 rows of x (2, 4 or 8 of them quantized per program, or x quantized ahead in its own
    launch: the tile's x_ahead) with an all-zero group (scale 1), against the twin's exact integer sums."""
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, split, warps, ring = tile
    _against_the_twin(SkinnyConfig(block_n, 128, 8, split, warps, 2, ring, x_ahead=ahead), zero_point, (1, 2, 3, 5, 8))


def _against_the_twin(cfg, zero_point: bool, ms: tuple[int, ...]) -> None:
    """The kernel at tile `cfg` on 40 groups, each of `ms` rows of x with an all-zero group, against
    emulate_kernel_a8's exact integer sums; NaN-poisoned outputs."""
    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.quant.int4_mma_layout import emulate_kernel_a8

    n, k = 512, 40 * 128
    g = _gen()
    _, mw = _quantized(n, k, zero_point, g)
    cpu = (mw.words.cpu(), mw.scales.cpu(), None if mw.zeros is None else mw.zeros.cpu())
    for m in ms:
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        x[m - 1, 128:256] = 0
        y = int4_a8_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
        twin = emulate_kernel_a8(*cpu, x.cpu(), n)
        assert _rel(y.cpu(), twin) < REL, m
        assert (y.float().cpu() - twin.float()).abs().max() <= 2 ** -6 * twin.float().abs().max(), m


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_int4_a8_27b_shapes(name, zero_point):
    """The tiles a8_config gives (the packaged int4_a8 entries, else the bf16 kernel's) at the 27B's projections,
    1 .. 8 rows."""
    from hinfer.ops.triton.linear_int4_a8 import a8_takes, int4_a8_matmul
    from hinfer.ops.triton.tiles.linear import a8_config

    n, k = SHAPES[name]
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for m in (1, 2, 3, 8):
        if not a8_takes(m, n, k, zero=zero_point):
            continue
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_a8_matmul(x, mw, out=_poisoned(m, n))
        assert _rel(y, q.matmul_ref_a8(x)) < REL, (m, a8_config(m, n, k))


def test_int4_a8_through_the_switch_with_a_tail_and_in_a_graph(monkeypatch):
    """HINFER_INT4_DECODE=a8 routes Int4MmaWeight.matmul and matmul_tail (bf16 tail rows in the same launch) to
    the kernel; a CUDA graph replays it (split-K counters reset) on new x."""
    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

    monkeypatch.setenv("HINFER_INT4_DECODE", "bf16")
    n, k = 1024, H
    _, mw = _quantized(n, k, True, _gen(1))
    x = torch.randn(1, k, generator=_gen(2), device="cuda").bfloat16()
    assert torch.equal(mw.matmul(x), int4_mma_matmul(x, mw))
    monkeypatch.setenv("HINFER_INT4_DECODE", "a8")
    n, k, t = 1024, H, 20
    g = _gen()
    q, mw = _quantized(n, k, True, g)
    tail = (torch.randn(t, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    for m in (1, 4):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        assert torch.equal(mw.matmul(x), int4_a8_matmul(x, mw))
        out = _poisoned(m, n + t)
        assert mw.matmul_tail(x, tail, out)
        assert _rel(out[:, :n], q.matmul_ref_a8(x)) < REL
        assert _rel(out[:, n:], x.float() @ tail.float().t()) < REL
    x = torch.randn(1, k, generator=g, device="cuda").bfloat16()
    y = mw.matmul(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_g = mw.matmul(x)
    for _ in range(3):
        x.copy_(torch.randn(1, k, generator=g, device="cuda").bfloat16())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y_g, mw.matmul(x))
    assert not torch.equal(y_g, y)


def test_x_quantized_ahead_is_the_reference_bit_for_bit():
    """act_int8.quantize_x_int8 compiled (no fma contraction) against its reference at the 27B's widths."""
    from hinfer.ops.triton.act_int8 import quantize_x_int8
    from hinfer.quant.int4 import quantize_x_int8_ref

    g = _gen()
    for m, k in ((1, H), (8, 17408), (3, 6144)):
        x = (torch.randn(m, k, generator=g, device="cuda") * 3).bfloat16()
        got, want = quantize_x_int8(x), quantize_x_int8_ref(x)
        assert torch.equal(got.words, want.words) and torch.equal(got.scales, want.scales)
        assert torch.equal(got.sums, want.sums)


def test_silu_mul_in_the_x_quantization_equals_the_activation_then_the_projection():
    """Int4MmaWeight.silu_mul_matmul (the MLP's down): the SiLU-mul is applied where x is quantized, in the launch
    ahead (the 27B down's packaged two- and four-row entries) or in each program's prologue (its one-row entry,
    and prologue tiles at 2 to 8 rows): bit for bit the SiLU-mul kernel followed by the same matmul."""
    from hinfer.ops.activation import silu_mul
    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import a8_config

    n, k = SHAPES["down"]
    g = _gen()
    _, mw = _quantized(n, k, True, g)
    for m, ahead in ((2, True), (4, True), (1, False)):
        gu = (torch.randn(m, 2 * k, generator=g, device="cuda") * 2).bfloat16()
        assert a8_config(m, n, k).x_ahead == ahead
        got = mw.silu_mul_matmul(gu)
        assert got is not None and torch.equal(got, int4_a8_matmul(silu_mul(gu), mw)), m
    for m in (1, 2, 3, 8):  # the prologue's rows of x at other tiles
        cfg = SkinnyConfig(128, 128, 8, 8, 4, 2, 4, x_ahead=False)
        gu = (torch.randn(m, 2 * k, generator=g, device="cuda") * 2).bfloat16()
        got = int4_a8_matmul(gu, mw, cfg=cfg, silu_mul=True)
        assert torch.equal(got, int4_a8_matmul(silu_mul(gu), mw, cfg=cfg)), m


def test_add_norm_in_the_x_quantization_equals_add_rms_norm_then_the_projection():
    """Int4MmaWeight.norm_matmul (the MLP's gate_up after its add + RMSNorm): where the tile quantizes x ahead (the
    27B gate_up's 2-, 4- and 8-row entries) the add and the norm are done in that launch. The new residual is
    add_rms_norm's bit for bit; the product is the matmul of add_rms_norm's rows within REL (the launch sums the
    row's squares in its own order: rstd may differ in its last bit, and so a normed value by one bf16 step). At
    one row (x quantized in each program's prologue) it declines; a prologue tile with a norm is refused."""
    from hinfer.ops.triton.act_int8 import NormIn
    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.ops.triton.norm import add_rms_norm
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import a8_config

    n, k = SHAPES["gate_up"]
    g = _gen()
    _, mw = _quantized(n, k, True, g)
    w = (torch.randn(k, generator=g, device="cuda") * 0.1).bfloat16()
    for m, ahead in ((1, False), (2, True), (4, True), (8, True)):
        x = (torch.randn(m, k, generator=g, device="cuda") * 2).bfloat16()
        res = (torch.randn(m, k, generator=g, device="cuda") * 3).bfloat16()
        assert a8_config(m, n, k).x_ahead == ahead
        got = mw.norm_matmul(x, res, w, 1e-6)
        if not ahead:
            assert got is None
            with pytest.raises(ValueError, match="ahead"):
                int4_a8_matmul(x, mw, cfg=SkinnyConfig(128, 128, 8, 4, 4, 2, 4), norm=NormIn(res, w, 1e-6, x))
            continue
        y, r = add_rms_norm(x, res, w, 1e-6)
        assert got is not None and torch.equal(got[1], r), m
        assert _rel(got[0], int4_a8_matmul(y, mw)) < REL, m



@pytest.mark.parametrize("block_m", [8, 16, 32])
@pytest.mark.parametrize("tile", [(128, 4, 4, 4), (128, 3, 8, 2), (256, 2, 8, 4)])
def test_int4_a8_many_rows_with_x_ahead(tile, block_m):
    """Verification's rows (9-64: lanes x (K + 1)) on the int8 kernel with x quantized ahead, in MMA column blocks
    of 8, 16 or 32 rows of x a program."""
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, split, warps, ring = tile
    _against_the_twin(SkinnyConfig(block_n, 128, block_m, split, warps, 2, ring, x_ahead=True), True,
                      (9, 16, 24, 32, 45, 64))  # fmt: skip
