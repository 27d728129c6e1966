"""compressed-tensors `pack-quantized` W4A16 checkpoints (what llm-compressor writes), and the recipe a
pre-quantized checkpoint loads in (official block fp8 or compressed-tensors int4), from config.json alone.

config.json `quantization_config`:
  {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
   "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int",
       "symmetric": true, "strategy": "group", "group_size": 128, "actorder": null, ...},
       "input_activations": null, "output_activations": null}},
   "ignore": ["lm_head", "re:.*mlp.gate$", ...], "kv_cache_scheme": null, ...}
Targets and ignore entries are module names (`model.language_model.layers.0.mlp.down_proj`), `re:` regexes
matched from the start of the name (re.match), or class names (`Linear`: every Linear layer).

Per quantized Linear `X` the checkpoint stores (and `PackedInt4Tensor` holds):
  X.weight_packed      int32 [N, ceil(K/8)]: element 8c + e of a row at bits 4e of word c, as q + 8 (q in [-8, 7])
  X.weight_scale       float [N, ceil(K/group)]
  X.weight_shape       int [2] = (N, K)
  X.weight_zero_point  int32 [ceil(N/8), ceil(K/group)], asymmetric only: zero points + 8, packed along N
                       (older writers: int8 [N, ceil(K/group)] unpacked, all 0 for symmetric schemes)
  X.weight_g_idx       int [K], activation reordering (`actorder: group`) only: the group of each column
Value: w[n, k] = (q - zero) * scale[n, k // group] (zero = 0 when symmetric).

What maps onto hinfer's int4 kernels (else a one-line CheckpointError): 4-bit int weights, `strategy: group`
with `group_size: 128`, no activation quantization, no `actorder: group` / g_idx permutation (`weight` /
`static` keep contiguous groups and are fine), no sparsity or transforms, no KV-cache scheme.

Config parsing and `stored_recipe` do not import torch (the memory plan may call them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hinfer.errors import CheckpointError
from hinfer.weights.inventory import inventory

if TYPE_CHECKING:
    import torch

    from hinfer.config import ModelConfig
    from hinfer.quant.int4 import Int4Weight
    from hinfer.quant.recipes import QuantRecipe

METHOD = "compressed-tensors"
FORMAT = "pack-quantized"
GROUP = 128  # the only group size hinfer's int4 kernels run
EXPERTS = "experts"  # the routed experts' recipe target (hinfer.quant.recipes.EXPERTS; this module is torch-free)
PACKED, SCALE, SHAPE = "weight_packed", "weight_scale", "weight_shape"
ZERO, G_IDX = "weight_zero_point", "weight_g_idx"
COMPONENTS = (PACKED, SCALE, SHAPE, ZERO, G_IDX)
_OK_ACTORDER = (None, False, "weight", "static")


# ---- config ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CTGroup:
    name: str
    targets: tuple[str, ...]
    symmetric: bool


@dataclass(frozen=True)
class CTConfig:
    """A validated compressed-tensors W4A16 group-128 quantization_config."""

    groups: tuple[CTGroup, ...]
    ignore: tuple[str, ...]
    group_size: int = GROUP

    @property
    def symmetric(self) -> bool:
        """True when every group is symmetric (no zero points anywhere)."""
        return all(g.symmetric for g in self.groups)

    def quantizes(self, module: str) -> bool:
        """Whether the config quantizes Linear module `module` (its full checkpoint name)."""
        if any(_matches(module, p) for p in self.ignore):
            return False
        return any(_matches(module, t) for g in self.groups for t in g.targets)


def _matches(module: str, pattern: str) -> bool:
    """compressed-tensors' rule for a Linear module: `re:` regex from the start, exact name, or a class name
    (`Linear`; other class names never match a Linear here)."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], module) is not None
        except re.error:
            return False
    return pattern == module or pattern == "Linear"


def _unsupported(where: str, what: str) -> CheckpointError:
    return CheckpointError(f"{where}: compressed-tensors checkpoint with {what} is not supported (hinfer loads "
                           "W4A16 pack-quantized int4, symmetric or not, group_size 128, no g_idx reordering)")


def parse_config(q: dict[str, Any], where: str) -> CTConfig:
    """Validate a compressed-tensors quantization_config against what hinfer runs; one-line CheckpointError."""
    fmt = q.get("format")
    if fmt not in (None, FORMAT, "mixed-precision"):
        raise _unsupported(where, f"format {fmt!r}")
    status = q.get("quantization_status")
    if status not in (None, "compressed"):
        raise _unsupported(where, f"quantization_status {status!r} (weights not packed)")
    sparsity = q.get("sparsity_config")
    if sparsity and (not isinstance(sparsity, dict) or sparsity.get("format") not in (None, "dense")):
        raise _unsupported(where, "a sparsity_config")
    if q.get("transform_config"):
        raise _unsupported(where, "a transform_config (rotations)")
    if q.get("kv_cache_scheme"):
        raise _unsupported(where, "a kv_cache_scheme (quantized KV cache)")
    groups_raw = q.get("config_groups")
    if not isinstance(groups_raw, dict) or not groups_raw:
        raise CheckpointError(f"{where}: compressed-tensors quantization_config has no config_groups")
    groups = []
    for name, g in groups_raw.items():
        if not isinstance(g, dict):
            raise CheckpointError(f"{where}: config_groups.{name} is not an object")
        for act in ("input_activations", "output_activations"):
            if g.get(act):
                raise _unsupported(where, f"{act} in {name} (activation quantization)")
        gfmt = g.get("format")
        if gfmt not in (None, FORMAT):
            raise _unsupported(where, f"format {gfmt!r} in {name}")
        w = g.get("weights")
        if not isinstance(w, dict):
            raise _unsupported(where, f"no weight quantization in {name}")
        bits, kind = w.get("num_bits", 8), str(w.get("type", "int")).lower()
        if bits != 4 or kind != "int":
            raise _unsupported(where, f"{bits}-bit {kind} weights in {name}")
        size = w.get("group_size")
        strategy = w.get("strategy") or ("group" if isinstance(size, int) and size > 0 else
                                         "channel" if size == -1 else "tensor")
        strategy = str(strategy).lower()
        if strategy != "group":
            raise _unsupported(where, f"strategy {strategy!r} in {name}")
        if size != GROUP:
            raise _unsupported(where, f"group_size {size} in {name}")
        actorder = w.get("actorder")
        actorder = actorder.lower() if isinstance(actorder, str) else actorder
        if actorder not in _OK_ACTORDER:
            raise _unsupported(where, f"actorder {w.get('actorder')!r} in {name} (g_idx column reordering)")
        if w.get("dynamic") or w.get("block_structure"):
            raise _unsupported(where, f"dynamic or block-structured weights in {name}")
        targets = g.get("targets") or []
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise CheckpointError(f"{where}: config_groups.{name}.targets is not a list of names")
        groups.append(CTGroup(name, tuple(targets), bool(w.get("symmetric", True))))
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(t, str) for t in ignore):
        raise CheckpointError(f"{where}: compressed-tensors ignore is not a list of names")
    return CTConfig(tuple(groups), tuple(ignore))


def quantization_config(raw: dict[str, Any]) -> dict[str, Any] | None:
    """config.json's quantization_config (top level, or in text_config)."""
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    return q if q else None


# ---- the recipe a pre-quantized checkpoint loads in ---------------------------------------------------------
def stored_recipe(cfg: ModelConfig, where: str = "config.json") -> tuple[QuantRecipe | None, str | None]:
    """(recipe, None) when the checkpoint's stored quantization loads as it is into hinfer's formats:
    `fp8-block` for official block-fp8 checkpoints, `int4-default` (asymmetric) / `int4-sym` for
    compressed-tensors W4A16; a recipe role that the checkpoint leaves unquantized in every layer is dropped from
    the recipe's targets (those weights stay in the model dtype). `fp8-block` includes the MoE routed experts
    (block-scaled `Fp8ExpertsWeight`s) unless an expert's gate_proj rows (moe_intermediate_size) are not a
    multiple of 128: its blocks could not be fused with up_proj's, so the experts alone drop out of the recipe
    and load dequantized (tiny test configs; 512 / 1024 on the real MoE models). (None, why) for an fp8
    checkpoint that cannot load as fp8 (block size, fused linear parts not multiples of 128); (None, None) for
    an unquantized checkpoint. Invalid compressed-tensors configs raise CheckpointError."""
    q = quantization_config(cfg.extra.get("raw", {}))
    if q is None:
        return None, None
    method = q.get("quant_method")
    if method == "fp8":
        return _fp8_recipe(cfg, q)
    if method == METHOD:
        ct = parse_config(q, where)
        from hinfer.quant.recipes import RECIPES

        base = RECIPES["int4-sym" if ct.symmetric else "int4-default"]
        return _narrow(base, cfg, ct.quantizes), None
    return None, None  # the reader refuses other methods with its own message


def _fp8_recipe(cfg: ModelConfig, q: dict[str, Any]) -> tuple[QuantRecipe | None, str | None]:
    from hinfer.quant.recipes import RECIPES
    from hinfer.weights.hf_layout import not_converted, strip_prefix

    block = q.get("weight_block_size") or [128, 128]
    if list(block) != [128, 128]:
        return None, f"its fp8 blocks are {list(block)} and hinfer's fp8 kernels take 128x128"
    skip = q.get("modules_to_not_convert") or []
    recipe = _narrow(RECIPES["fp8-block"], cfg,
                     lambda m: not (not_converted(m, skip) or not_converted(strip_prefix(m), skip)))
    for role, parts in _fused_parts(cfg).items():
        if role not in recipe.targets:
            continue
        for (name, rows), (nxt, _) in zip(parts, parts[1:]):  # every part but the last starts a new block row
            if rows % 128 == 0:
                continue
            if role == EXPERTS:  # the routed experts alone load dequantized (as before fp8 experts existed)
                recipe = replace(recipe, name=_as_stored(recipe.name), targets=recipe.targets - {EXPERTS})
                break
            return None, (f"{name} has {rows} rows, not a multiple of 128, so its 128x128 fp8 blocks cannot "
                          f"be fused with {nxt}")
    return recipe, None


def _as_stored(name: str) -> str:
    return name if name.endswith(" (as stored)") else f"{name} (as stored)"


def _fused_parts(cfg: ModelConfig) -> dict[str, list[tuple[str, int]]]:
    """Per recipe role, the parts fused into one quantized matrix (rows), in order (GDN b/a rows are kept)."""
    hd = cfg.head_dim
    out = {"attn_qkv": [("q_proj", 2 * cfg.num_attention_heads * hd), ("k_proj", cfg.num_key_value_heads * hd),
                        ("v_proj", cfg.num_key_value_heads * hd)],
           "gdn_in": [("in_proj_qkv", cfg.gdn_conv_dim), ("in_proj_z", cfg.gdn_value_dim)]}
    if not all(cfg.layer_is_moe(i) for i in range(len(cfg.layer_types))):
        out["mlp"] = [("gate_proj", cfg.intermediate_size), ("up_proj", cfg.intermediate_size)]
    if cfg.is_moe and cfg.shared_expert_intermediate_size:
        s = cfg.shared_expert_intermediate_size
        out["shared_expert"] = [("shared_expert.gate_proj", s), ("shared_expert.up_proj", s)]
    if cfg.is_moe:  # each expert's gate_proj and up_proj fuse into experts_gate_up [E, 2I, H]
        i = cfg.moe_intermediate_size
        out[EXPERTS] = [("experts.gate_proj", i), ("experts.up_proj", i)]
    return out


def _narrow(base: QuantRecipe, cfg: ModelConfig, quantized) -> QuantRecipe:
    """`base` without the target roles whose every tensor (decoder layers; the MTP head is never converted)
    the checkpoint keeps unquantized: routed experts too, per expert. `quantized(full module name) -> bool`."""
    prefix = "model." if cfg.model_type.endswith("_text") else "model.language_model."
    seen: dict[str, bool] = {}
    for t in inventory(cfg):
        if t.mtp or t.role not in base.targets or seen.get(t.role):
            continue
        seen[t.role] = any(quantized(n.removesuffix(".weight").replace("model.language_model.", prefix, 1))
                           for n in t.names())
    targets = frozenset(r for r in base.targets if seen.get(r, True))
    if targets == base.targets:
        return base
    return replace(base, name=_as_stored(base.name), targets=targets)


# ---- one stored tensor set ----------------------------------------------------------------------------------
def _unpack_rows(words: torch.Tensor) -> torch.Tensor:
    """int32 [R, W] -> uint8 [R, 8W]: element 8c + e at bits 4e of word c (little-endian bytes, low nibble first)."""
    import torch

    r, w = words.shape
    b = words.contiguous().reshape(-1).view(torch.uint8).view(r, w * 4)  # reshape: [R, 1] views may keep odd strides
    return torch.stack([b & 0xF, b >> 4], dim=-1).view(r, w * 8)


def _pack_cols(u: torch.Tensor) -> torch.Tensor:
    """uint nibbles [R, C] -> int32 [R, ceil(C/8)] in the format's order (inverse of `_unpack_rows`)."""
    import torch

    r, c = u.shape
    w = math.ceil(c / 8)
    b = torch.zeros(r, w * 8, dtype=torch.uint8, device=u.device)
    b[:, :c] = u.to(torch.uint8)
    b = b.view(r, w * 4, 2)
    return (b[..., 0] | (b[..., 1] << 4)).contiguous().view(torch.int32).view(r, w)


class PackedInt4Tensor:
    """One compressed-tensors pack-quantized Linear weight as stored, kept packed until the loader decides
    (an `Int4Weight`, repacked exactly, or dequantized)."""

    def __init__(self, weight_packed: torch.Tensor, weight_scale: torch.Tensor, weight_shape: tuple[int, int],
                 weight_zero_point: torch.Tensor | None = None, weight_g_idx: torch.Tensor | None = None,
                 group: int = GROUP, name: str = "weight"):
        self.packed, self.scale = weight_packed, weight_scale
        self.zero_point, self.g_idx = weight_zero_point, weight_g_idx
        self.n, self.k = (int(v) for v in weight_shape)
        self.group, self.name = group, name
        g = math.ceil(self.k / group)
        zp_shapes = ((math.ceil(self.n / 8), g), (self.n, g))  # packed along N, or unpacked (older writers)
        ok = (tuple(weight_packed.shape) == (self.n, math.ceil(self.k / 8)) and tuple(weight_scale.shape) == (self.n, g)
              and (weight_zero_point is None or tuple(weight_zero_point.shape) in zp_shapes)
              and (weight_g_idx is None or tuple(weight_g_idx.shape) == (self.k,)))
        if not ok:
            zp = "" if weight_zero_point is None else f", zero point {list(weight_zero_point.shape)}"
            raise CheckpointError(f"{name}: packed int4 tensors {list(weight_packed.shape)}, scale "
                                  f"{list(weight_scale.shape)}{zp} do not fit weight_shape {[self.n, self.k]} "
                                  f"with group {group}")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def symmetric(self) -> bool:
        return self.zero_point is None

    def to(self, device: torch.device | str) -> PackedInt4Tensor:
        zp = None if self.zero_point is None else self.zero_point.to(device)
        gi = None if self.g_idx is None else self.g_idx.to(device)
        return PackedInt4Tensor(self.packed.to(device), self.scale.to(device), (self.n, self.k), zp, gi,
                                self.group, self.name)

    def codes(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(u uint8 [N, K] = q + 8, zero uint8 [N, G] = zero point + 8, or None when symmetric)."""
        u = _unpack_rows(self.packed)[:, : self.k]
        return u, self._zeros()

    def _zeros(self) -> torch.Tensor | None:
        import torch

        zp = self.zero_point
        if zp is None:
            return None
        if zp.dtype != torch.int32:  # unpacked signed zero points [N, G] (older writers, symmetric schemes)
            return (zp.to(torch.int16) + 8).to(torch.uint8)
        return _unpack_rows(zp.t()).t()[: self.n].contiguous()

    def _group_index(self) -> torch.Tensor:
        import torch

        if self.g_idx is not None:
            return self.g_idx.long()
        return torch.arange(self.k, device=self.packed.device) // self.group

    def has_reordering(self) -> bool:
        """g_idx that is not the contiguous k // group (activation reordering)."""
        import torch

        if self.g_idx is None:
            return False
        plain = torch.arange(self.k, device=self.g_idx.device) // self.group
        return not torch.equal(self.g_idx.long(), plain)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(u - zero) * scale in fp32 (g_idx honoured), rounded once to `dtype` (default: the scale dtype)."""
        u, zero = self.codes()
        gi = self._group_index()
        z = 8.0 if zero is None else zero.float()[:, gi]
        w = (u.float() - z) * self.scale.float()[:, gi]
        return w.to(dtype or self.scale.dtype)

    def to_int4weight(self) -> Int4Weight:
        """The same values as an `Int4Weight` (exact repack; scales keep the stored dtype)."""
        import torch

        from hinfer.quant.int4 import Int4Weight

        if self.has_reordering():
            raise CheckpointError(f"{self.name}: weight_g_idx reorders columns across groups (activation "
                                  "reordering); hinfer's int4 kernels need contiguous groups of 128")
        if self.k % 8 or self.group != GROUP:
            raise CheckpointError(f"{self.name}: int4 weight [{self.n}, {self.k}] group {self.group}: hinfer's int4 "
                                  "kernels need K % 8 == 0 and groups of 128")
        zp = self.zero_point
        if zp is not None and zp.dtype != torch.int32:  # unpacked: repack along N as the format packs it
            zp = _pack_cols((zp.to(torch.int16) + 8).t().contiguous()).t().contiguous()
        return Int4Weight.from_compressed_tensors(self.packed, self.scale, (self.n, self.k), zp, self.group)

    def drop_trivial_zero_points(self) -> bool:
        """Forget zero points that are all 0 (a symmetric scheme written with them); True if dropped."""
        z = self._zeros()
        if z is not None and bool((z == 8).all()):
            self.zero_point = None
            return True
        return z is None

    def __repr__(self) -> str:
        kind = "sym" if self.symmetric else "asym"
        return f"PackedInt4Tensor({[self.n, self.k]}, g{self.group} {kind})"
