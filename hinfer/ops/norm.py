"""RMSNorm variants. Qwen3.5's is zero-centred: x * rsqrt(mean(x^2) + eps) * (1 + w), computed in fp32."""

from __future__ import annotations

import torch

from hinfer.ops.dispatch import launch_fusions, use_triton
from hinfer.ops.linear import linear


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)


def add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual += x (in the model dtype, as the reference does); returns (rms_norm(residual), residual). x [...,
    S, N] against a residual [..., N] is each row's S addends (a MoE layer's experts, left unsummed): their fp32
    sum in slot order, rounded to x's dtype, is the x added."""
    if x.dim() == residual.dim() + 1:
        x = sum_slots_ref(x)
    r = residual + x
    return rms_norm_ref(r, weight, eps), r


def sum_slots_ref(x: torch.Tensor) -> torch.Tensor:
    """[..., S, N] -> [..., N]: the S rows summed in fp32 one after another, rounded once to x's dtype."""
    acc = x.select(-2, 0).float()
    for s in range(1, x.shape[-2]):
        acc = acc + x.select(-2, s).float()
    return acc.to(x.dtype)


def gated_rms_norm_ref(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """GDN output norm: plain weight (not 1 + w), gated by silu(z). Normalised over the last dim (head_v_dim)."""
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    y = weight * y
    return (y.float() * torch.nn.functional.silu(z.float())).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x):
        from hinfer.ops.triton import norm as tn

        return tn.rms_norm(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(x):
        from hinfer.ops.triton import norm as tn

        return tn.add_rms_norm(x, residual, weight, eps)
    return add_rms_norm_ref(x, residual, weight, eps)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x):
        from hinfer.ops.triton import norm as tn

        return tn.gated_rms_norm(x, z, weight, eps)
    return gated_rms_norm_ref(x, z, weight, eps)


def add_rms_norm_linear(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, lin_weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """add_rms_norm, then linear(normed, lin_weight): (normed, residual, linear). With the `norm_linear` launch
    fusion on (HINFER_FUSE_LAUNCHES; by default up to 8 rows), decode rows and a plain weight in x's dtype
    (a MoE router) run all three in one launch."""
    if (use_triton(x) and x.dim() == 2 and isinstance(lin_weight, torch.Tensor) and lin_weight.dtype == x.dtype
            and lin_weight.is_contiguous() and x.stride(-1) == 1 and residual.stride(-1) == 1
            and launch_fusions("norm_linear", x.shape[0])):  # fmt: skip
        from hinfer.ops.triton import norm_linear as tnl

        return tnl.add_rms_norm_linear(x, residual, weight, lin_weight, eps)
    y, r = add_rms_norm(x, residual, weight, eps)
    return y, r, linear(y, lin_weight)


def add_rms_norm_into_linear(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, lin_weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear(add_rms_norm(x, residual)[0], lin_weight), residual + x): the normed rows go only into the linear,
    so a weight that quantizes its x may norm it there (`norm_matmul`: int4 on the int4 x int8 kernel; None where
    it does not), one launch fewer."""
    fused = getattr(lin_weight, "norm_matmul", None)
    out = fused(x, residual, weight, eps) if fused is not None else None
    if out is not None:
        return out
    y, r = add_rms_norm(x, residual, weight, eps)
    return linear(y, lin_weight), r
