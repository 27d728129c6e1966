"""hinfer.ops.linear's swiglu_linear: the SwiGLU down projection equals linear(silu_mul(h), w) for plain and
quantized weights on the paths this machine runs (the fused int4 tensor-core launch is checked on the GPU:
tests/gpu/test_int4_mma.py)."""

from __future__ import annotations

import torch

from hinfer.ops.activation import silu_mul
from hinfer.ops.linear import linear, swiglu_linear
from hinfer.quant import quantize_int4


def test_swiglu_linear_equals_silu_mul_then_linear(seed):
    h = torch.randn(3, 2 * 256).bfloat16()
    w = (torch.randn(64, 256) * 256**-0.5).bfloat16()
    assert torch.equal(swiglu_linear(h, w), linear(silu_mul(h), w)), f"seed {seed}"
    q = quantize_int4(w)
    assert torch.equal(swiglu_linear(h, q), linear(silu_mul(h), q)), f"seed {seed}"


def test_swiglu_linear_takes_the_weights_fused_launch(seed):
    """A weight with `matmul_glu` gets the [gate | up] rows whole; None from it falls back to the two ops."""
    w = (torch.randn(32, 128) * 128**-0.5).bfloat16()
    h = torch.randn(2, 256).bfloat16()
    seen = []

    class Fused:
        shape = (32, 128)

        def __init__(self, answer: bool) -> None:
            self.answer = answer

        def matmul(self, x: torch.Tensor) -> torch.Tensor:
            return linear(x, w)

        def matmul_glu(self, gate_up: torch.Tensor) -> torch.Tensor | None:
            seen.append(tuple(gate_up.shape))
            return linear(silu_mul(gate_up), w) if self.answer else None

    want = linear(silu_mul(h), w)
    assert torch.equal(swiglu_linear(h, Fused(True)), want)
    assert torch.equal(swiglu_linear(h, Fused(False)), want)
    assert seen == [(2, 256), (2, 256)]
