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


def sigmoid_gate_ref(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Attention output gate: x * sigmoid(gate), both [T, H, D] (gate may be a strided view)."""
    return x * torch.sigmoid(gate)


def sigmoid_gate(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    if use_triton(x):
        from hinfer.ops.triton.activation import sigmoid_gate as sigmoid_gate_triton

        return sigmoid_gate_triton(x, gate)
    return sigmoid_gate_ref(x, gate)
