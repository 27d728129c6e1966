"""Load a pre-quantized checkpoint as it is: official block-fp8 (`weight` e4m3 + `weight_scale_inv` 128x128)
into `Fp8Weight`s, compressed-tensors pack-quantized int4 into `Int4Weight`s, with no dequantize round trip.

The model ends up structured exactly as `quantize_model(model, recipe)` leaves it (`recipe` from
`hinfer.weights.compressed_tensors.stored_recipe`: `fp8-block`, `int4-default` or `int4-sym`, possibly without
the roles the checkpoint keeps unquantized everywhere): the recipe's target weights become quantized objects (the
MoE routed experts `Int4ExpertsWeight`s or block-scaled `Fp8ExpertsWeight`s, filled expert by expert from the
per-expert tensors or the fused [E, N, K] ones), the GDN in_proj b/a rows a bf16 `RowSplitWeight` tail,
everything else a plain parameter in the model dtype. So the memory plan's bytes for that recipe are the model's
bytes.

Building: the model is made on the meta device, then each decoder layer is built for real and its target
weights swapped for empty quantized objects at once, so peak memory is the quantized model plus one layer in the
model dtype. Then the checkpoint streams in, each stored tensor going to its rows:
- a target part stored quantized in the target's format: copied as is (fused parts stack rows: exact for int4's
  row-wise groups; for fp8 128x128 blocks each part must start on a block row, i.e. the parts before it have
  row counts that are multiples of 128 - an expert's gate_proj before its up_proj too -, else a
  CheckpointError; stored_recipe leaves such parts out of the recipe beforehand);
- a target part stored unquantized (a module the checkpoint ignores while others of its kind are quantized):
  quantized by our quantizer, exactly as `quantize_model` would (a warning says how many);
- anything else stored quantized (the MTP head, routers, the GDN b/a tail, a role the recipe keeps): dequantized
  to the model dtype.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch
from torch import nn

from hinfer.errors import CheckpointError
from hinfer.model.loader import Target, check_complete, checkpoint_targets, expert_target, place_tensor
from hinfer.model.qwen3_5 import DecoderLayer, MTPHead, Qwen35ForCausalLM
from hinfer.ops.parallel import SINGLE, TensorParallel
from hinfer.quant.apply import RowSplitWeight
from hinfer.quant.apply import expert_targets as recipe_expert_targets
from hinfer.quant.apply import weight_targets as recipe_targets
from hinfer.quant.experts import Fp8ExpertsWeight, Int4ExpertsWeight
from hinfer.quant.fp8 import BLOCK, Fp8Weight
from hinfer.quant.fp8_block import FP8_DTYPE, Fp8BlockTensor, quantize_fp8_block
from hinfer.quant.int4 import Int4Weight, quantize_int4
from hinfer.quant.recipes import QuantRecipe
from hinfer.weights.compressed_tensors import PackedInt4Tensor

log = logging.getLogger(__name__)

Stored = torch.Tensor | Fp8BlockTensor | PackedInt4Tensor


class _Slot:
    """One quantized weight being filled: its quantized head rows and the plain tail rows (GDN b/a) if any; for
    routed experts an `Int4ExpertsWeight` / `Fp8ExpertsWeight`, filled expert by expert (`head_rows` is then one
    expert's N)."""

    def __init__(self, path: str, head: Fp8Weight | Int4Weight | Int4ExpertsWeight | Fp8ExpertsWeight,
                 tail: torch.Tensor | None):
        self.path, self.head, self.tail = path, head, tail
        self.experts = isinstance(head, (Int4ExpertsWeight, Fp8ExpertsWeight))
        self.head_rows = head.shape[1] if self.experts else head.shape[0]


def _empty_quantized(n: int, k: int, recipe: QuantRecipe, dtype: torch.dtype, device) -> Fp8Weight | Int4Weight:
    if recipe.fmt == "fp8":
        if recipe.fp8_scales != "block":
            raise ValueError(f"recipe {recipe.name}: only block-scaled fp8 loads as stored")
        scale = torch.empty(math.ceil(n / BLOCK[0]), math.ceil(k / BLOCK[1]), dtype=torch.float32, device=device)
        return Fp8Weight(torch.empty(n, k, dtype=FP8_DTYPE, device=device), scale, BLOCK)
    if k % 8:
        raise CheckpointError(f"int4 weights need K % 8 == 0, this config has a [{n}, {k}] projection")
    g = math.ceil(k / recipe.int4_group)
    zeros = torch.empty(n, g, dtype=torch.uint8, device=device) if recipe.int4_zero_point else None
    return Int4Weight(torch.empty(n, k // 8, dtype=torch.int32, device=device),
                      torch.empty(n, g, dtype=dtype, device=device), zeros, k, recipe.int4_group)


def _empty_experts(e: int, n: int, k: int, recipe: QuantRecipe, dtype: torch.dtype,
                   device) -> Int4ExpertsWeight | Fp8ExpertsWeight:
    if recipe.fmt == "fp8":  # block scales per expert: [E, ceil(N/128), ceil(K/128)]
        if recipe.fp8_scales != "block":
            raise ValueError(f"recipe {recipe.name}: only block-scaled fp8 loads as stored")
        scale = torch.empty(e, math.ceil(n / BLOCK[0]), math.ceil(k / BLOCK[1]), dtype=torch.float32, device=device)
        return Fp8ExpertsWeight(torch.empty(e, n, k, dtype=FP8_DTYPE, device=device), scale, BLOCK)
    flat = _empty_quantized(e * n, k, recipe, dtype, device)  # int4 groups run along rows: one [E*N, K] stack
    zeros = None if flat.zeros is None else flat.zeros.view(e, n, -1)
    return Int4ExpertsWeight(flat.qweight.view(e, n, -1), flat.scales.view(e, n, -1), zeros, k, flat.group)


def _install(layer: nn.Module, prefix: str, recipe: QuantRecipe, dtype: torch.dtype, device,
             slots: dict[str, _Slot]) -> None:
    """Swap the recipe's target weights of one freshly built layer for empty quantized objects."""
    names = {id(m): n for n, m in layer.named_modules(prefix=prefix)}
    for module, attr, keep in list(recipe_targets(layer, recipe)):
        w = module._parameters[attr]
        n, k = w.shape
        head = _empty_quantized(n - keep, k, recipe, dtype, device)
        obj: nn.Module = head if keep == 0 else RowSplitWeight(head, torch.empty(keep, k, dtype=dtype, device=device))
        del module._parameters[attr], w
        setattr(module, attr, obj)
        path = f"{names[id(module)]}.{attr}"
        slots[path] = _Slot(path, head, obj.tail if keep else None)
    for moe, attr in list(recipe_expert_targets(layer, recipe)):
        w = moe._parameters[attr]
        e, n, k = w.shape
        obj = _empty_experts(e, n, k, recipe, dtype, device)
        del moe._parameters[attr], w
        setattr(moe, attr, obj)
        path = f"{names[id(moe)]}.{attr}"
        slots[path] = _Slot(path, obj, None)


def build_skeleton(cfg, recipe: QuantRecipe, dtype: torch.dtype, device: torch.device | str,
                   with_mtp: bool = True, tp: TensorParallel = SINGLE) -> tuple[Qwen35ForCausalLM, dict[str, _Slot]]:
    """The model with uninitialised storage, structured as quantize_model(model, recipe) leaves it (with `tp`,
    one rank's shard of it: `cfg` is then the rank config)."""
    net = Qwen35ForCausalLM(cfg, dtype, "meta", with_mtp=with_mtp, tp=tp)
    for pname, p in list(net.named_parameters(recurse=False)):
        setattr(net, pname, nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=False))
    slots: dict[str, _Slot] = {}
    for i, kind in enumerate(cfg.layer_types):
        net.layers[i] = DecoderLayer(cfg, i, kind, cfg.layer_is_moe(i), dtype, device, tp)
        _install(net.layers[i], f"layers.{i}", recipe, dtype, device, slots)
    if net.mtp is not None:
        net.mtp = MTPHead(cfg, dtype, device, tp)
        if recipe.convert_mtp:
            for j, layer in enumerate(net.mtp.layers):
                _install(layer, f"mtp.layers.{j}", recipe, dtype, device, slots)
            w = net.mtp._parameters.pop("fc")
            net.mtp.fc = _empty_quantized(*w.shape, recipe, dtype, device)
            slots["mtp.fc"] = _Slot("mtp.fc", net.mtp.fc, None)
    return net, slots


def _expert_slice(x: Stored, e: int) -> Stored:
    if isinstance(x, torch.Tensor):
        return x[e]
    if isinstance(x, Fp8BlockTensor):
        return Fp8BlockTensor(x.weight[e], x.scale_inv[e], x.block)
    raise CheckpointError(f"{x!r}: stacked packed int4 experts are not a compressed-tensors layout")


def _plain(x: Stored, dtype: torch.dtype, device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return x.to(device).dequantize(dtype)


class _Filler:
    """Copies stored tensors into quantized slots; counts what had to be converted for one summary warning."""

    def __init__(self, source: str, dtype: torch.dtype, device):
        self.source, self.dtype, self.device = source, dtype, device
        self.requantized: dict[str, None] = {}  # ordered set of names
        self.lossy_scales = 0

    def place(self, slot: _Slot, start: int, rows: int, name: str, x: Stored, expert: int | None = None) -> None:
        if slot.experts and expert is None:  # fused experts [E, N, K] as stored: expert by expert
            if tuple(x.shape) != tuple(slot.head.shape):
                raise CheckpointError(f"{self.source}: tensor {name!r} has shape {list(x.shape)}, expected "
                                      f"{list(slot.head.shape)} for this config")
            for e in range(x.shape[0]):
                self.place(slot, start, rows, name, _expert_slice(x, e), e)
            return
        if slot.experts:
            slot = _Slot(slot.path, slot.head.expert(expert), None)  # views of expert e's buffers
        k = slot.head.shape[1]
        if tuple(x.shape) != (rows, k):
            raise CheckpointError(f"{self.source}: tensor {name!r} has shape {list(x.shape)}, expected {[rows, k]} "
                                  "for this config")
        n_head = slot.head_rows
        if start >= n_head:  # the plain tail (GDN in_proj b/a rows)
            assert slot.tail is not None
            with torch.no_grad():
                slot.tail[start - n_head : start - n_head + rows].copy_(_plain(x, self.dtype, self.device))
            return
        if start + rows > n_head:
            raise CheckpointError(f"{self.source}: tensor {name!r} straddles the quantized rows of {slot.path}")
        if isinstance(slot.head, Fp8Weight):
            self._fp8(slot, start, rows, name, x)
        else:
            self._int4(slot, start, rows, name, x)

    def _fp8(self, slot: _Slot, start: int, rows: int, name: str, x: Stored) -> None:
        if start % BLOCK[0] or (rows % BLOCK[0] and start + rows != slot.head_rows):
            raise CheckpointError(f"{self.source}: {name!r} ({rows} rows at row {start} of {slot.path}) does not "
                                  f"start and end on 128-row block boundaries, so its 128x128 fp8 blocks cannot be "
                                  "fused; load with --weights bf16")
        if isinstance(x, Fp8BlockTensor) and x.block == BLOCK:
            q, s = x.weight, x.scale_inv
        else:  # stored unquantized (or in another layout): quantized exactly as quantize_model would
            self.requantized[name] = None
            q, s = quantize_fp8_block(_plain(x, self.dtype, self.device), BLOCK)
        r0 = start // BLOCK[0]
        with torch.no_grad():
            slot.head.weight[start : start + rows].copy_(q)
            slot.head.scale[r0 : r0 + s.shape[0]].copy_(s)

    def _int4(self, slot: _Slot, start: int, rows: int, name: str, x: Stored) -> None:
        head: Int4Weight = slot.head  # type: ignore[assignment]
        if isinstance(x, PackedInt4Tensor):
            x = x.to(self.device)
            if head.zeros is None and not x.drop_trivial_zero_points():
                raise CheckpointError(f"{self.source}: {name!r} has nonzero zero points, but the checkpoint's "
                                      "quantization_config says every group is symmetric")
            q = x.to_int4weight()
            if q.scales.dtype != self.dtype and not torch.equal(q.scales.to(self.dtype).to(q.scales.dtype), q.scales):
                self.lossy_scales += 1
        else:  # stored unquantized (ignored module) or fp8: quantized exactly as quantize_model would
            self.requantized[name] = None
            q = quantize_int4(_plain(x, self.dtype, self.device), head.group, head.zeros is not None, self.dtype)
        end = start + rows
        with torch.no_grad():
            head.qweight[start:end].copy_(q.qweight)
            head.scales[start:end].copy_(q.scales)
            if head.zeros is not None and q.zeros is not None:
                head.zeros[start:end].copy_(q.zeros)
            elif head.zeros is not None:  # a symmetric part in an asymmetric model: zero point 8, exactly
                head.zeros[start:end].fill_(8)

    def report(self) -> None:
        if self.requantized:
            log.warning("%s: %d tensors that the recipe quantizes are stored unquantized (e.g. %s); quantized on "
                        "load", self.source, len(self.requantized), next(iter(self.requantized)))
        if self.lossy_scales:
            log.warning("%s: %d int4 scale tensors do not convert exactly to %s", self.source, self.lossy_scales,
                        str(self.dtype).removeprefix("torch."))


def load_stored_weights(net: Qwen35ForCausalLM, slots: dict[str, _Slot], items: Iterable[tuple[str, Stored]],
                        source: str = "checkpoint") -> None:
    """Fill a `build_skeleton` model from (stripped name, stored value) pairs (`HFCheckpoint.iter_stored`);
    CheckpointError on unknown, misshapen, duplicate or missing tensors, as `load_weights`."""
    dtype, device = net.dtype, net.embed_tokens.device
    targets = _skeleton_targets(net, slots)
    plain = {n: t for n, t in targets.items() if t.name not in slots}
    quant: dict[str, tuple[_Slot, int, int]] = {}
    for name, t in targets.items():
        if t.name in slots:
            slot = slots[t.name]
            quant[name] = (slot, t.start, t.rows if t.rows is not None else slot.head_rows)
    fill = _Filler(source, dtype, device)
    seen: dict[str, str] = {}
    for name, x in items:
        if net.mtp is None and name.startswith("mtp."):
            continue
        if net.lm_head is None and name == "lm_head.weight":
            continue
        if name in seen:
            raise CheckpointError(f"{source}: tensor {name!r} appears twice")
        if name in quant:
            slot, start, rows = quant[name]
            fill.place(slot, start, rows, name, x)
            seen[name] = slot.path
        elif name not in plain and (t := expert_target(net, name, source)) is not None and t.name in slots:
            fill.place(slots[t.name], t.start, t.rows if t.rows is not None else slots[t.name].head_rows, name, x,
                       t.expert)
            seen[name] = t.name
        else:
            seen[name] = place_tensor(net, plain, name, _plain(x, dtype, device), source)
    check_complete(net, targets, seen, source)
    fill.report()


def _skeleton_targets(net: Qwen35ForCausalLM, slots: dict[str, _Slot]) -> dict[str, Target]:
    """Checkpoint name -> target as for the unquantized model (same names, rows), with real parameters for the
    plain ones; a quantized one's target names its slot (`Target.name`)."""
    ref = Qwen35ForCausalLM(net.cfg, net.dtype, "meta", with_mtp=net.mtp is not None, tp=net.tp)
    out: dict[str, Target] = {}
    for name, t in checkpoint_targets(ref).items():
        param = None if t.name in slots else net.get_parameter(t.name)
        out[name] = Target(param, t.name, t.start, t.rows)  # type: ignore[arg-type]
    return out


def load_quantized_checkpoint(ckpt, recipe: QuantRecipe, dtype: torch.dtype, device: torch.device | str,
                              with_mtp: bool = True, progress: bool = True) -> Qwen35ForCausalLM:
    """An `HFCheckpoint` holding fp8-block or compressed-tensors int4 weights, loaded as stored per `recipe`."""
    net, slots = build_skeleton(ckpt.config, recipe, dtype, device, with_mtp)
    load_stored_weights(net, slots, ckpt.iter_stored(progress), str(ckpt.path))
    return net
