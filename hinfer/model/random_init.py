"""Random weights in place, at the model's real shapes, on its device (benchmarks, tests): no file involved.

Scales keep activations finite and non-trivial through every layer: projections ~ N(0, 1/fan_in) (outputs
scaled down by the depth), zero-centred norm weights ~ N(0, 0.1), GDN output norm ~ 1, A_log = log U(1, 16),
dt_bias ~ N(1, 0.1), embeddings ~ N(0, 1). The vision tower (`random_vision`): LayerNorm weights ~ N(1, 0.1)
(plain, not zero-centred), biases ~ N(0, 0.02), projections ~ N(0, 1/fan_in) over every input dim (the patch
embedding's Conv3d included; block outputs scaled down by the depth), the learned position grid ~ N(0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from hinfer.config import ModelConfig
from hinfer.model.qwen3_5 import DecoderLayer, MTPHead, Qwen35ForCausalLM
from hinfer.model.vision import VisionEncoder
from hinfer.ops.parallel import SINGLE, TensorParallel


@torch.no_grad()
def random_init(model: Qwen35ForCausalLM, seed: int = 0) -> Qwen35ForCausalLM:
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)  # generate where the weights live: 27B on GPU in seconds
    text = ((n, p) for n, p in model.named_parameters() if not n.startswith("visual."))
    _fill(text, model.cfg.num_hidden_layers, gen, dev)
    if model.visual is not None:
        _fill_vision(model.visual, gen, dev)
    return model


@torch.no_grad()
def random_vision(model: Qwen35ForCausalLM, seed: int = 0) -> VisionEncoder:
    """The config's vision tower at its exact shapes with random weights, in the model's activation dtype on its
    device (whatever format the language model is in), attached as `model.visual`."""
    vision = model.cfg.vision
    if vision is None:
        raise ValueError("this config has no vision_config")
    dev, dtype = model.embed_tokens.device, model.embed_tokens.dtype
    model.visual = VisionEncoder(vision, dtype, dev)
    _fill_vision(model.visual, torch.Generator(device=dev).manual_seed(seed), dev)
    return model.visual


def _fill_vision(visual: VisionEncoder, gen: torch.Generator, dev) -> None:
    depth_scale = 1.0 / math.sqrt(2 * max(1, visual.cfg.depth))
    for name, p in visual.named_parameters():
        if name.endswith("bias"):
            vals = 0.02 * torch.randn(p.shape, generator=gen, device=dev)
        elif "norm" in name:
            vals = 1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=dev)
        elif name == "pos_embed.weight":
            vals = torch.randn(p.shape, generator=gen, device=dev)
        else:
            std = 1.0 / math.sqrt(math.prod(p.shape[1:]))
            if name.endswith(("attn.proj.weight", "mlp.linear_fc2.weight")):  # what each block adds to its stream
                std *= depth_scale
            vals = torch.randn(p.shape, generator=gen, device=dev, dtype=p.dtype).mul_(std)
        p.copy_(vals.to(p.dtype))


@torch.no_grad()
def random_quantized(
    cfg: ModelConfig, recipe, device: torch.device | str, with_mtp: bool = False, seed: int = 0,
    dtype: torch.dtype = torch.bfloat16, tp: TensorParallel = SINGLE,
) -> Qwen35ForCausalLM:
    """A random model already in `recipe`'s format, built one decoder layer at a time: peak memory is the quantized
    model plus one bf16 layer (the 122B-A10B's bf16 weights exceed any single GPU). Same value rules as random_init
    (not the same draws). With `tp`, `cfg` is the rank config (sharding.rank_config) and the model this rank's
    shard, its values this rank's own draws."""
    from hinfer.quant.apply import quantize_layer, quantize_weight
    from hinfer.quant.recipes import get_recipe

    r, dev = get_recipe(recipe), torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    model = Qwen35ForCausalLM(cfg, dtype, "meta", with_mtp=with_mtp, tp=tp)
    n = cfg.num_hidden_layers
    for name, p in list(model.named_parameters(recurse=False)):
        setattr(model, name, nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=dev), requires_grad=False))
    _fill(model.named_parameters(recurse=False), n, gen, dev)
    for i, kind in enumerate(cfg.layer_types):
        layer = DecoderLayer(cfg, i, kind, cfg.layer_is_moe(i), dtype, dev, tp)
        _fill(layer.named_parameters(prefix=f"layers.{i}"), n, gen, dev)
        quantize_layer(layer, r)
        model.layers[i] = layer
    if model.mtp is not None:
        mtp = MTPHead(cfg, dtype, dev, tp)
        _fill(mtp.named_parameters(prefix="mtp"), n, gen, dev)
        if r.convert_mtp:
            for layer in mtp.layers:
                quantize_layer(layer, r)
            mtp.fc = quantize_weight(mtp._parameters.pop("fc"), r)
        model.mtp = mtp
    return model


def _fill(named: Iterable[tuple[str, torch.Tensor]], num_layers: int, gen: torch.Generator, dev) -> None:
    depth_scale = 1.0 / math.sqrt(2 * max(1, num_layers))
    for name, p in named:
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
