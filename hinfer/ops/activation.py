"""SwiGLU on a fused [gate | up] projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinfer.ops.dispatch import use_triton


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    g, u = gate_up.chunk(2, dim=-1)
    return F.silu(g) * u


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    if use_triton(gate_up):
        from hinfer.ops.triton.activation import silu_mul as silu_mul_triton

        return silu_mul_triton(gate_up)
    return silu_mul_ref(gate_up)
