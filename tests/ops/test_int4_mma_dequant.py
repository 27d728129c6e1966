"""The Triton dequantization of fragment-ordered int4 weights (the prefill path of Int4MmaWeight) against
Int4Weight.dequantize, in Triton's interpreter. Tolerance: one bf16 step (2^-8 relative), room for an
interpreter that truncates fp32 -> bf16 where the GPU rounds to nearest; tests/gpu checks bit equality."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize
from hinfer.quant.int4 import quantize_int4
from hinfer.quant.int4_mma_layout import Int4MmaWeight


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
