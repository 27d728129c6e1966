"""Mixture of experts: softmax router with renormalised top-k, SwiGLU experts stored fused [E, 2I, H] / [E, H, I]."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinfer.ops.dispatch import use_triton


def moe_route_ref(router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (weights [T, k] in the logits' dtype, expert ids [T, k] int64)."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    top_w, top_i = torch.topk(probs, top_k, dim=-1)
    top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    return top_w.to(router_logits.dtype), top_i


def moe_experts_ref(
    x: torch.Tensor,  # [T, H]
    w_gate_up: torch.Tensor,  # [E, 2I, H]
    w_down: torch.Tensor,  # [E, H, I]
    top_w: torch.Tensor,  # [T, k]
    top_i: torch.Tensor,  # [T, k]
) -> torch.Tensor:
    out = torch.zeros_like(x)
    for e in torch.unique(top_i).tolist():
        tok, slot = torch.where(top_i == e)
        h = F.linear(x[tok], w_gate_up[e])
        g, u = h.chunk(2, dim=-1)
        y = F.linear(F.silu(g) * u, w_down[e]) * top_w[tok, slot, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


def moe_route(router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(router_logits):
        from hinfer.ops.triton import moe as tm

        return tm.moe_route(router_logits, top_k)
    return moe_route_ref(router_logits, top_k)


def moe_experts(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, top_w: torch.Tensor, top_i: torch.Tensor
) -> torch.Tensor:
    if use_triton(x):
        from hinfer.ops.triton import moe as tm

        return tm.moe_experts(x, w_gate_up, w_down, top_w, top_i)
    return moe_experts_ref(x, w_gate_up, w_down, top_w, top_i)
