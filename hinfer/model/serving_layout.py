"""A loaded model's weights in the form the serving kernels read, the same on every rank: the shared experts
folded into the routed ones (on a GPU), the int4 weights in mma fragment order and the int4 experts' words stripe
by stripe (each a no-op where its kernels do not run). The weights move; their values and memory do not."""

from __future__ import annotations

import torch
from torch import nn

from hinfer.model.expert_stripes import stripe_int4_experts
from hinfer.model.shared_expert_fold import fold_shared_experts
from hinfer.quant.int4_mma_weight import use_fragment_order


def lay_out_for_serving(model: nn.Module, device: torch.device) -> None:
    """In place, after loading (and after any lm_head conversion)."""
    if device.type == "cuda":  # fewer launches per MoE layer; the CPU keeps the model as loaded (tests share it)
        fold_shared_experts(model)
    use_fragment_order(model)
    stripe_int4_experts(model)  # after the fold: the shared expert's rows stripe with the rest
