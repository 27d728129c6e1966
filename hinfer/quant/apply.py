"""quantize_model: replace the recipe's projection weights of a loaded model with quantized weight objects.

The model calls `linear(x, self.o_proj)` / `linear(x, self.in_proj.weight)`, and `linear` calls `.matmul(x)` on
anything that is not a tensor, so swapping the attribute is all it takes; likewise `moe_experts` takes the MoE
layer's routed experts as `Int4ExpertsWeight` / `Fp8ExpertsWeight` objects (hinfer.quant.experts). Layer by
layer, each bf16 parameter is deleted as soon as its replacement exists, so peak memory stays near the bf16 model
plus one projection (one layer's fused routed experts, for MoE models).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from hinfer.quant.experts import quantize_experts
from hinfer.quant.fp8 import quantize_fp8
from hinfer.quant.int4 import quantize_int4
from hinfer.quant.recipes import QuantRecipe, get_recipe


class RowSplitWeight(nn.Module):
    """Rows [0, N-T) in a quantized `head`, the last T rows kept as a plain tensor `tail`; y = [x@head^T, x@tail^T].

    Used for the fused GDN in_proj whose trailing in_proj_b/in_proj_a rows stay in the model dtype. At decode sizes
    both parts write straight into column slices of one output (no concatenation copy), in one launch when the
    head's kernel takes the tail rows too (`matmul_tail`: the int4 tensor-core kernel)."""

    def __init__(self, head: nn.Module, tail: torch.Tensor):
        super().__init__()
        if head.shape[1] != tail.shape[1]:
            raise ValueError(f"head {tuple(head.shape)} and tail {tuple(tail.shape)} differ in K")
        self.head = head
        self.tail = nn.Parameter(tail, requires_grad=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.head.shape[0] + self.tail.shape[0], self.tail.shape[1])

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        from hinfer.ops.dispatch import launch_fusions, use_triton

        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        nh = self.head.shape[0]
        if use_triton(x2) and x2.dtype == torch.bfloat16 == self.tail.dtype:
            from hinfer.ops.triton.linear import bf16_linear

            out = torch.empty((x2.shape[0], self.shape[0]), dtype=x.dtype, device=x.device)
            fused = getattr(self.head, "matmul_tail", None)  # one launch: the head's kernel takes the tail rows too
            if fused is None or not launch_fusions("tail", x2.shape[0]) or not fused(x2, self.tail, out):
                self.head.matmul(x2, out=out[:, :nh])
                bf16_linear(x2, self.tail, out=out[:, nh:])
        else:
            out = torch.cat([self.head.matmul(x2), torch.nn.functional.linear(x2, self.tail)], dim=-1)
        return out.view(*lead, -1)


def quantize_weight(w: torch.Tensor, recipe: QuantRecipe) -> nn.Module:
    """One [N, K] weight in the recipe's format."""
    if recipe.fmt == "int4":
        return quantize_int4(w, recipe.int4_group, recipe.int4_zero_point)
    if recipe.fmt == "fp8":
        return quantize_fp8(w, recipe.fp8_scales)
    raise ValueError(f"recipe {recipe.name} converts nothing")


def weight_targets(layer: nn.Module, r: QuantRecipe) -> Iterator[tuple[nn.Module, str, int]]:
    """(module, attribute, rows kept at the end) for each weight of one decoder layer the recipe converts."""
    t = r.targets
    if hasattr(layer, "self_attn"):
        if "attn_qkv" in t:
            yield layer.self_attn.qkv_proj, "weight", 0
        if "attn_o" in t:
            yield layer.self_attn, "o_proj", 0
    if hasattr(layer, "linear_attn"):
        gdn = layer.linear_attn
        if "gdn_in" in t:
            yield gdn.in_proj, "weight", 2 * gdn.hv if r.keep_gdn_ab else 0
        if "gdn_out" in t:
            yield gdn, "out_proj", 0
    mlp = layer.mlp
    dense = getattr(mlp, "gate_up", None) is not None
    shared = getattr(mlp, "shared_expert", None)
    for m, key in ((mlp if dense else None, "mlp"), (shared, "shared_expert")):
        if m is not None and key in t:
            yield m.gate_up, "weight", 0
            yield m, "down_proj", 0


def expert_targets(layer: nn.Module, r: QuantRecipe) -> Iterator[tuple[nn.Module, str]]:
    """(SparseMoE, attribute) for the routed experts of one decoder layer, if the recipe converts them."""
    if r.experts and getattr(layer.mlp, "experts_gate_up", None) is not None:
        yield layer.mlp, "experts_gate_up"
        yield layer.mlp, "experts_down"


@torch.no_grad()
def quantize_model(model: nn.Module, recipe: str | QuantRecipe) -> None:
    """Quantize `model` (a Qwen35ForCausalLM) in place per `recipe` (a name, a format or a QuantRecipe)."""
    r = get_recipe(recipe)
    if r.fmt == "bf16":
        return
    layers = list(model.layers)
    if r.convert_mtp and getattr(model, "mtp", None) is not None:
        layers += list(model.mtp.layers)
    for layer in layers:
        quantize_layer(layer, r)
    if r.convert_mtp and getattr(model, "mtp", None) is not None and isinstance(model.mtp.fc, torch.Tensor):
        w = model.mtp._parameters.pop("fc")
        model.mtp.fc = quantize_weight(w, r)


@torch.no_grad()
def quantize_head(model: nn.Module, fmt: str) -> None:
    """The logits projection in `fmt` (fp8 | int4, that format's default recipe), whatever the body's format: the
    largest single weight a decode step reads (248320 x H rows: 1.0 GB of bf16 on the 35B-A3B, 2.5 GB on the 27B).
    Unlike the body's formats it changes every token's logits directly. A tied model (lm_head None: the embedding
    table is the head) gets a quantized copy for the logits; the table stays for the lookups."""
    w = model.embed_tokens if model.lm_head is None else model.lm_head
    if not isinstance(w, torch.Tensor):
        return  # already converted
    q = quantize_weight(w.detach(), get_recipe(fmt))
    model._parameters.pop("lm_head", None)  # the bf16 head (absent when tied) goes with the last reference
    del w
    model.lm_head = q


@torch.no_grad()
def quantize_layer(layer: nn.Module, recipe: str | QuantRecipe) -> None:
    """Quantize one decoder layer in place (what quantize_model does to each)."""
    r = get_recipe(recipe)
    if r.fmt == "bf16":
        return
    for module, name, keep in weight_targets(layer, r):
        w = module._parameters.get(name)
        if w is None or not isinstance(w, torch.Tensor):
            continue  # already quantized
        head = quantize_weight(w[: w.shape[0] - keep], r)
        q = head if keep == 0 else RowSplitWeight(head, w[w.shape[0] - keep :].clone())
        del module._parameters[name]  # the bf16 tensor is freed with the last reference (w, below)
        setattr(module, name, q)
        del w, head, q
    for moe, name in expert_targets(layer, r):
        w = moe._parameters.get(name)
        if w is None or not isinstance(w, torch.Tensor):
            continue  # already quantized
        q = quantize_experts(w, r)
        del moe._parameters[name]
        setattr(moe, name, q)
        del w, q


def quantized_nbytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer of the model (quantized weights included)."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
