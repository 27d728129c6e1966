"""The Triton prefill paths of fragment-ordered int4 weights (Int4MmaWeight) in Triton's interpreter: the
dequantization against Int4Weight.dequantize (tolerance one bf16 step, 2^-8 relative, room for an interpreter that
truncates fp32 -> bf16 where the GPU rounds to nearest; tests/gpu checks bit equality) and the repacking into
rows against the torch inverse of the layout, bit for bit."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize, int4_mma_rows
from hinfer.quant.int4 import fp8_row_scale, quantize_int4, unpack_int4, weight_to_fp8_rows
from hinfer.quant.int4_mma_layout import unpermute_words
from hinfer.quant.int4_mma_weight import Int4MmaWeight


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("n,k", [(96, 256), (64, 384)])
def test_dequantize_matches_int4weight(interpreter, n, k, zero_point):
    g = torch.Generator().manual_seed(fixed_test_seed())
    q = quantize_int4(torch.randn(n, k, generator=g).bfloat16(), zero_point=zero_point)
    w = Int4MmaWeight.from_int4(q)
    d = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k)
    ref = q.dequantize(torch.float32)
    assert d.dtype == torch.bfloat16 and d.shape == (n, k)
    torch.testing.assert_close(d.float(), ref, rtol=2**-8, atol=0)


@pytest.mark.parametrize("n,k", [(96, 256), (64, 384)])
def test_rows_are_the_weight_it_came_from(interpreter, n, k):
    g = torch.Generator().manual_seed(fixed_test_seed())
    q = quantize_int4(torch.randn(n, k, generator=g).bfloat16())
    w = Int4MmaWeight.from_int4(q)
    rows = int4_mma_rows(w.words, n, k)
    assert rows.dtype == torch.int32 and torch.equal(rows, q.qweight)
    assert torch.equal(rows, unpermute_words(w.words, k))


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_dequantize_to_fp8_rows(interpreter, zero_point):
    """The e4m3 scratch of HINFER_INT4_PREFILL=fp8: value / row scale rounded once, as weight_to_fp8_rows; every
    value in range (the row scale reaches the row's largest |value|). An interpreter may round the fp32 quotient
    differently at a tie: at most one e4m3 step (2^-3 relative) apart, on under 1% of the values."""
    n, k = 96, 256
    g = torch.Generator().manual_seed(fixed_test_seed())
    q = quantize_int4(torch.randn(n, k, generator=g).bfloat16(), zero_point=zero_point)
    w = Int4MmaWeight.from_int4(q)
    rs = w.fp8_row_scale()
    assert torch.equal(rs, fp8_row_scale(q.scales, q.zeros))
    d = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, row_scale=rs)
    ref = weight_to_fp8_rows(q.dequantize(torch.float32), rs)
    assert d.dtype == torch.float8_e4m3fn and d.shape == (n, k)
    assert d.float().abs().max() <= 448
    torch.testing.assert_close(d.float(), ref.float(), rtol=2**-3, atol=2**-9)
    assert (d.float() != ref.float()).float().mean() < 0.01


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_dequantize_unscaled_is_exact(interpreter, zero_point):
    """The e4m3 scratch of the w4a8 prefill on cuBLAS: u - z itself (|u - z| <= 15, exact in e4m3); times the
    group scales it is the weight."""
    n, k = 64, 384
    g = torch.Generator().manual_seed(fixed_test_seed())
    q = quantize_int4(torch.randn(n, k, generator=g).bfloat16(), zero_point=zero_point)
    w = Int4MmaWeight.from_int4(q)
    d = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, unscaled=True)
    assert d.dtype == torch.float8_e4m3fn
    u = unpermute_words(w.words, k)
    zero = torch.full((n, k // 128), 8) if q.zeros is None else q.zeros.long()
    want = unpack_int4(u, k).float() - zero.repeat_interleave(128, 1).float()
    assert torch.equal(d.float(), want)
    torch.testing.assert_close(d.float() * q.scales.float().repeat_interleave(128, 1), q.dequantize(torch.float32))


@pytest.mark.parametrize("form", ["bf16", "fp8_rows", "unscaled"])
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_coalesced_dequantize_matches_the_gathering_one(interpreter, zero_point, form):
    """The kernel reading each word once writes what the gathering one writes, bit for bit, in every form."""
    n, k = 96, 256
    g = torch.Generator().manual_seed(fixed_test_seed())
    q = quantize_int4(torch.randn(n, k, generator=g).bfloat16(), zero_point=zero_point)
    w = Int4MmaWeight.from_int4(q)
    kw = {"row_scale": w.fp8_row_scale()} if form == "fp8_rows" else {"unscaled": True} if form == "unscaled" else {}
    gathered = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, coalesced=False, **kw)
    coalesced = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, coalesced=True, **kw)
    assert coalesced.dtype == gathered.dtype and torch.equal(coalesced.float(), gathered.float())
