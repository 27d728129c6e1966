"""Bytes of the model's weights per weight format, from the config alone (no checkpoint read).

The parameter inventory (every text tensor of the checkpoint, with its role) is hinfer/weights/inventory.py.

The recipes are the quantizer's own (`hinfer/quant/recipes.py`, torch-free, so `hinfer plan` stays fast; a test
checks the bytes against a quantized model):

- fp8 (e4m3, 1 byte per element) with fp32 scales: "channel" one per output row (`fp8-default`, our
  conversion) or "block" one per 128x128 block (`fp8-block`, the official Qwen FP8 layout);
- int4 (0.5 byte per element) with one scale per row and group of 128 inputs in the model dtype, plus a uint8
  zero point per group when asymmetric (`int4-default`; `int4-sym` has none).

Converted by default: attention qkv/o, GDN in_proj (qkv, z; b and a stay unquantized with keep_gdn_ab), GDN
out_proj, dense MLP, MoE shared experts and the MoE routed experts (target "experts": per expert the linear
layers' layout of the format - int4 groups, fp8 per-channel or 128x128 block scales -, so their bytes are the
per-expert entries' own). Kept in the unquantized dtype (bf16 on GPU, fp32 on the CPU reference path):
embedding, lm_head, the MTP head (unless convert_mtp), MoE routers, conv1d, norms, A_log, dt_bias. Our model
fuses some projections (q+k+v, gate+up; gate+up of each expert); every real config has row counts that are
multiples of 128 (routed experts: I = 512 on the 35B-A3B, 1024 on the 122B-A10B), so block scales count the
same fused or not, and int4 groups and per-channel scales run along rows, so they count the same fused or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from hinfer.config import ModelConfig
from hinfer.quant.recipes import RECIPES as RECIPES  # re-exported: the plan and its tests name recipes here
from hinfer.quant.recipes import QuantRecipe as Recipe
from hinfer.quant.recipes import get_recipe
from hinfer.weights.compressed_tensors import stored_recipe
from hinfer.weights.inventory import GDN_AB, GDN_IN, MTP_FC, TensorSpec, inventory

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}


def converts(recipe: Recipe, t: TensorSpec) -> bool:
    """Whether `recipe` quantizes tensor `t` (the quantizer's rules, by role)."""
    if recipe.fmt == "bf16" or (t.mtp and not recipe.convert_mtp):
        return False
    if t.role == GDN_AB:
        return GDN_IN in recipe.targets and not recipe.keep_gdn_ab
    if t.role == MTP_FC:
        return recipe.convert_mtp
    return t.role in recipe.targets


def resolve_weights(cfg: ModelConfig, weights: str | Recipe) -> str | Recipe:
    """--weights -> the recipe the weights are kept in. `auto`, or the format the checkpoint stores, keeps a
    quantized checkpoint as it is (official block fp8 -> `fp8-block`, compressed-tensors W4A16 -> `int4-default`
    or `int4-sym`, narrowed to the roles it quantizes: hinfer.weights.compressed_tensors.stored_recipe); other
    `auto` -> bf16; fp8 | int4 -> that format's default recipe (converted after loading)."""
    if not isinstance(weights, str) or weights not in ("auto", "fp8", "int4"):
        return weights
    stored, _ = stored_recipe(cfg)
    if stored is not None and weights in ("auto", stored.fmt):
        return stored
    return "bf16" if weights == "auto" else weights


# ---- bytes --------------------------------------------------------------------------------------------------
def tensor_bytes(t: TensorSpec, recipe: Recipe, dtype_bytes: int) -> int:
    """Bytes of one inventory entry; unquantized tensors (and int4 scales) take `dtype_bytes` per element."""
    if not converts(recipe, t):
        return t.numel * dtype_bytes
    return t.count * matrix_bytes(t.shape[0], math.prod(t.shape[1:]), recipe, dtype_bytes)


def matrix_bytes(n: int, k: int, recipe: Recipe, dtype_bytes: int) -> int:
    """Bytes of one [n, k] weight in the recipe's format (values, scales, zeros)."""
    if recipe.fmt == "bf16":
        return n * k * dtype_bytes
    if recipe.fmt == "fp8":
        scales = n if recipe.fp8_scales == "channel" else math.ceil(n / 128) * math.ceil(k / 128)
        return n * k + 4 * scales
    groups = n * math.ceil(k / recipe.int4_group)
    per_group = dtype_bytes + (1 if recipe.int4_zero_point else 0)  # scale in the model dtype, uint8 zero
    return n * math.ceil(k / 2) + groups * per_group


def draft_head_bytes(cfg: ModelConfig, weights: str | Recipe, dtype_bytes: int = 2, vocab: int | None = None) -> int:
    """The MTP drafter's own lm_head copy with --spec mtp: quantized like the model's weights (int4 | fp8 default
    recipe of that format), its first `vocab` rows with --spec-draft-vocab; none for bf16 weights (the drafter
    then shares the model's lm_head, or a view of its rows)."""
    fmt = get_recipe(weights).fmt
    if fmt == "bf16" or not cfg.mtp_num_hidden_layers:
        return 0
    return matrix_bytes(min(vocab or cfg.vocab_size, cfg.vocab_size), cfg.hidden_size, get_recipe(fmt), dtype_bytes)


def lm_head_delta(cfg: ModelConfig, fmt: str, dtype_bytes: int = 2) -> int:
    """Bytes --lm-head FMT adds to the weights (negative: saves): the head in that format's default recipe instead
    of the model dtype, or, tied, a quantized copy beside the embedding table (hinfer.quant.apply.quantize_head)."""
    if fmt == "keep":
        return 0
    q = matrix_bytes(cfg.vocab_size, cfg.hidden_size, get_recipe(fmt), dtype_bytes)
    return q if cfg.tie_word_embeddings else q - cfg.vocab_size * cfg.hidden_size * dtype_bytes


@dataclass(frozen=True)
class WeightBytes:
    total: int
    params: int  # elements counted
    converted_params: int
    kept_params: int
    by_role: dict[str, int]  # bytes


@lru_cache(maxsize=64)
def weight_bytes(cfg: ModelConfig, weights: str | Recipe, dtype_bytes: int = 2, include_mtp: bool = True) -> WeightBytes:
    """Resident bytes of the weights in format/recipe `weights` (unquantized tensors at `dtype_bytes`)."""
    recipe = get_recipe(weights)
    total = params = conv = 0  # (lru_cache: a Recipe is frozen, so hashable)
    by_role: dict[str, int] = {}
    for t in inventory(cfg):
        if t.mtp and not include_mtp:
            continue
        b = tensor_bytes(t, recipe, dtype_bytes)
        total += b
        params += t.numel
        conv += t.numel if converts(recipe, t) else 0
        by_role[t.role] = by_role.get(t.role, 0) + b
    return WeightBytes(total, params, conv, params - conv, by_role)
