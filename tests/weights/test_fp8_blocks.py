"""Block FP8 quantize / dequantize: the official 128x128 layout, partial edge blocks, batched experts."""

from __future__ import annotations

import pytest
import torch

from hinfer.quant.fp8_block import FP8_MAX, dequantize_fp8_block, quantize_fp8_block, scale_shape


def _expected(q: torch.Tensor, s: torch.Tensor, block: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """weight x its block scale, block by block (independent of the implementation's broadcasting)."""
    out = torch.empty(q.shape, dtype=torch.float32)
    for bi in range(s.shape[0]):
        for bj in range(s.shape[1]):
            rows, cols = slice(bi * block[0], (bi + 1) * block[0]), slice(bj * block[1], (bj + 1) * block[1])
            out[rows, cols] = q[rows, cols].float() * s[bi, bj]
    return out.to(dtype)


@pytest.mark.parametrize(("shape", "block"), [((200, 136), (128, 128)), ((256, 128), (128, 128)),
                                              ((37, 50), (16, 8)), ((5, 3), (128, 128))])
def test_round_trip_and_exact_dequant(shape, block):
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(shape, generator=g) * 0.05).to(torch.bfloat16)
    q, s = quantize_fp8_block(w, block)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert s.dtype == torch.float32 and s.shape == scale_shape(shape, block)
    for dtype in (torch.bfloat16, torch.float32):
        assert torch.equal(dequantize_fp8_block(q, s, block, dtype), _expected(q, s, block, dtype))
    # scale = amax/448 per block, so each block's largest value maps to +-448 and round-trips closely
    deq = dequantize_fp8_block(q, s, block, torch.float32)
    assert q.float().abs().max() == FP8_MAX
    err = (deq - w.float()).abs()
    assert bool((err <= 0.0625 * w.float().abs() + s.max() * 2**-9).all())


def test_batched_experts_equal_per_slice():
    w = torch.randn(3, 70, 40)
    q, s = quantize_fp8_block(w, (32, 32))
    assert s.shape == (3, 3, 2)
    deq = dequantize_fp8_block(q, s, (32, 32))
    for e in range(3):
        qe, se = quantize_fp8_block(w[e], (32, 32))
        assert torch.equal(q[e].view(torch.uint8), qe.view(torch.uint8)) and torch.equal(s[e], se)
        assert torch.equal(deq[e], _expected(qe, se, (32, 32), torch.bfloat16))


def test_zero_block_and_bad_scale_shape():
    w = torch.zeros(4, 300)
    w[:, 200:] = 1.0
    q, s = quantize_fp8_block(w)
    assert s[0, 0] == 1.0 and s[0, 2] == pytest.approx(1 / 448)
    assert torch.equal(dequantize_fp8_block(q, s, dtype=torch.float32), w)
    with pytest.raises(ValueError, match="scale_inv shape"):
        dequantize_fp8_block(q, s[:, :2])
