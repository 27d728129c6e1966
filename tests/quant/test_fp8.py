"""FP8 format: per-channel and official block-scaled weights, dynamic activation quantization, references."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.quant.fp8 import Fp8Weight, dequantize_act_fp8_ref, quantize_act_fp8_ref, quantize_fp8
from hinfer.quant.fp8_block import FP8_DTYPE, FP8_MAX, dequantize_fp8_block, quantize_fp8_block


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(fixed_test_seed())


def test_channel_round_trip_exact_for_representable_weights():
    g = _gen()
    codes = (torch.randn(24, 200, generator=g) * 100).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    codes[:, 0] = FP8_MAX  # row amax is 448 codes: scale recovers exactly
    s = 2.0 ** torch.randint(-12, -4, (24,), generator=g).float()
    w = codes.float() * s[:, None]
    q = quantize_fp8(w)
    assert q.block is None and torch.equal(q.scale, s) and torch.equal(q.weight.view(torch.uint8),
                                                                     codes.view(torch.uint8))
    assert torch.equal(q.dequantize(torch.float32), w)


def test_channel_error_bound_on_gaussian_weights():
    g = _gen()
    w = torch.randn(128, 512, generator=g)
    d = quantize_fp8(w).dequantize(torch.float32)
    rel = ((d - w).norm() / w.norm()).item()
    assert rel < 0.03  # documented: ~0.022 (e4m3 keeps 3 mantissa bits)
    assert ((d - w).abs() <= w.abs() * 2**-4 + w.abs().amax(1, keepdim=True) / FP8_MAX * 2**-6).all()


def test_block_weight_is_the_official_layout():
    g = _gen()
    w = torch.randn(200, 300, generator=g)
    q = quantize_fp8(w, "block")
    wq, s = quantize_fp8_block(w)
    assert q.block == (128, 128) and q.scale.shape == (2, 3)
    assert torch.equal(q.weight.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(q.scale, s)
    assert torch.equal(q.dequantize(torch.bfloat16), dequantize_fp8_block(wq, s))
    same = Fp8Weight.from_block_scaled(wq, s)
    assert torch.equal(same.dequantize(torch.float32), q.dequantize(torch.float32))
    with pytest.raises(ValueError, match="scale shape"):
        Fp8Weight(wq, s[:, :2], (128, 128))
    with pytest.raises(ValueError, match="float8"):
        Fp8Weight(w, s, (128, 128))


@pytest.mark.parametrize("group", [None, 128])
def test_activation_quantization_ref(group):
    g = _gen()
    x = torch.randn(7, 320, generator=g).bfloat16()
    x[3] = 0  # an all-zero row: finite scale, zero codes
    q, s = quantize_act_fp8_ref(x, group)
    assert q.dtype == FP8_DTYPE and s.shape == (7, 1 if group is None else 3)
    assert torch.isfinite(s).all() and (q[3].float() == 0).all()
    assert q.float().abs().amax().item() == FP8_MAX
    d = dequantize_act_fp8_ref(q, s, group)
    rel = ((d - x.float()).norm() / x.float().norm()).item()
    assert rel < 0.04


@pytest.mark.parametrize("scheme", ["channel", "block"])
def test_w8a8_reference_close_to_w8a16(scheme):
    g = _gen()
    w = torch.randn(96, 256, generator=g)
    q = quantize_fp8(w, scheme)
    x = torch.randn(9, 256, generator=g).bfloat16()
    a16, a8 = q.matmul_ref(x).float(), q.matmul_ref_w8a8(x).float()
    exact = x.float() @ w.t()
    assert ((a16 - exact).norm() / exact.norm()).item() < 0.04
    assert ((a8 - a16).norm() / a16.norm()).item() < 0.05
    assert torch.equal(q.matmul(x), q.matmul_ref(x))  # CPU dispatch is the W8A16 reference
