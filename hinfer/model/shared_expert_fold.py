"""The shared expert of a MoE layer folded into its routed experts, for serving: the shared MLP becomes expert E
of the fused experts (same intermediate size and weight format) and its sigmoid gate row E of the router, so a
layer is one router GEMV, one route kernel and the experts kernels (the route writes the shared expert as one
more slot of every token: weight sigmoid(gate logit), id E) instead of three more GEMVs, a SiLU, a gate and an
add. The weights move (the shared expert's tensors are dropped), so memory is unchanged."""

from __future__ import annotations

import logging

import torch
from torch import nn

from hinfer.quant.experts import append_expert

log = logging.getLogger("hinfer")


def _fold(moe: nn.Module) -> bool:
    shared = moe.shared_expert
    if shared is None:
        return False
    gate_up = append_expert(moe.experts_gate_up, shared.gate_up.weight)
    down = append_expert(moe.experts_down, shared.down_proj)
    router_ok = isinstance(moe.router, torch.Tensor) and isinstance(moe.shared_expert_gate, torch.Tensor)
    if gate_up is None or down is None or not router_ok or moe.router.dtype != moe.shared_expert_gate.dtype:
        return False
    router = torch.cat([moe.router.data, moe.shared_expert_gate.data])
    for name in ("experts_gate_up", "experts_down", "router", "shared_expert_gate"):
        delattr(moe, name)
    moe.experts_gate_up = gate_up if not isinstance(gate_up, torch.Tensor) else nn.Parameter(gate_up, False)
    moe.experts_down = down if not isinstance(down, torch.Tensor) else nn.Parameter(down, False)
    moe.router = nn.Parameter(router, requires_grad=False)
    moe.shared_expert = None
    return True


@torch.no_grad()
def fold_shared_experts(model: nn.Module) -> int:
    """Fold every SparseMoE of `model` (decoder layers and MTP head) whose shared expert matches its experts'
    shape and format. -> how many were folded (one log line)."""
    from hinfer.model.qwen3_5 import SparseMoE

    moes = [m for m in model.modules() if isinstance(m, SparseMoE)]
    n = sum(_fold(m) for m in moes)
    if moes:
        log.info("shared experts folded into the routed experts: %d of %d MoE layers", n, len(moes))
    return n
