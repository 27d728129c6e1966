"""Random weights in place, at the model's real shapes, on its device (benchmarks, tests): no file involved.

Scales keep activations finite and non-trivial through every layer: projections ~ N(0, 1/fan_in) (outputs
scaled down by the depth), zero-centred norm weights ~ N(0, 0.1), GDN output norm ~ 1, A_log = log U(1, 16),
dt_bias ~ N(1, 0.1), embeddings ~ N(0, 1).
"""

from __future__ import annotations

import math

import torch

from hinfer.model.qwen3_5 import Qwen35ForCausalLM


@torch.no_grad()
def random_init(model: Qwen35ForCausalLM, seed: int = 0) -> Qwen35ForCausalLM:
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)  # generate where the weights live: 27B on GPU in seconds
    depth_scale = 1.0 / math.sqrt(2 * max(1, model.cfg.num_hidden_layers))
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "A_log":
            vals = torch.empty(p.shape, device=dev).uniform_(1.0, 16.0, generator=gen).log_()
        elif leaf == "dt_bias":
            vals = torch.randn(p.shape, generator=gen, device=dev) * 0.1 + 1.0
        elif name.endswith("linear_attn.norm"):
            vals = 1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=dev)
        elif p.dim() == 1:  # zero-centred RMSNorm weights
            vals = 0.1 * torch.randn(p.shape, generator=gen, device=dev)
        elif leaf == "embed_tokens":
            vals = torch.randn(p.shape, generator=gen, device=dev)
        else:
            fan_in = p.shape[-1]
            std = 1.0 / math.sqrt(fan_in)
            if leaf in ("o_proj", "out_proj", "down_proj", "experts_down"):
                std *= depth_scale
            vals = torch.randn(p.shape, generator=gen, device=dev, dtype=p.dtype).mul_(std)
        p.copy_(vals.to(p.dtype))
    return model
