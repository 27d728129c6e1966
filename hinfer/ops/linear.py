"""y = x @ W^T. W is a plain tensor [out, in] or a quantized weight object with `.matmul(x)` (fp8, int4).

bf16 weights at decode sizes (at most SKINNY_MAX_M rows of x) on CUDA go to the Triton stream kernel, which
reads W once near copy bandwidth (cuBLAS's GEMV reaches ~78% of it); larger M goes to cuBLAS, already at the
tensor-core ceiling there. Quantized weights choose their own paths (hinfer.quant.int4 / hinfer.quant.fp8).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from hinfer.ops.activation import silu_mul
from hinfer.ops.dispatch import use_triton
from hinfer.ops.triton.tiles.forms import BF16
from hinfer.ops.triton.tiles.linear import SKINNY_MAX_M


class QuantizedWeight(Protocol):
    shape: tuple[int, int]  # logical [out, in]

    def matmul(self, x: torch.Tensor) -> torch.Tensor: ...


def linear_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def silu_mul_linear(gate_up: torch.Tensor, weight: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    """linear(silu_mul(gate_up), weight): the MLP's second half. A quantized weight that prepares its x itself may
    apply the activation there (`silu_mul_matmul`: int4's x quantized ahead, a launch fewer; None where it
    does not)."""
    fused = getattr(weight, "silu_mul_matmul", None)
    y = fused(gate_up) if fused is not None else None
    return y if y is not None else linear(silu_mul(gate_up), weight)


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        return weight.matmul(x)
    if (
        weight.dtype == torch.bfloat16
        and x.dtype == torch.bfloat16
        and 0 < x.numel() <= SKINNY_MAX_M[BF16] * x.shape[-1]
        and use_triton(x)
    ):
        from hinfer.ops.triton.linear import bf16_linear

        return bf16_linear(x, weight)
    return linear_ref(x, weight)
