"""Place Hugging Face checkpoint tensors (prefix-stripped names) into the model's fused parameters.

Streaming: each incoming tensor is copied into its slice of a preallocated parameter and dropped, so no second
copy of the model is ever held. Every parameter row must be written exactly once; anything missing, unknown or
of the wrong shape is a one-line CheckpointError naming the tensor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
from torch import nn

from hinfer.errors import CheckpointError
from hinfer.model.qwen3_5 import (
    Attention,
    DecoderLayer,
    Fused,
    GatedDeltaNet,
    MTPHead,
    Qwen35ForCausalLM,
    SparseMoE,
)

_EXPERT = re.compile(r"^(.*\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class Target:
    """Where one checkpoint tensor goes: a parameter, optionally rows [start, start+rows) or expert e."""

    def __init__(self, param: torch.Tensor, name: str, start: int = 0, rows: int | None = None, expert: int | None = None):
        self.param, self.name, self.start, self.rows, self.expert = param, name, start, rows, expert

    def view(self) -> torch.Tensor:
        p = self.param if self.expert is None else self.param[self.expert]
        return p if self.rows is None else p[self.start : self.start + self.rows]


def _module_targets(model: Qwen35ForCausalLM) -> dict[str, Target]:
    """Checkpoint name -> target, for every non-expert-sliced tensor of the checkpoint."""
    out: dict[str, Target] = {}
    for mod_name, mod in model.named_modules():
        if mod_name.split(".")[0] == "visual":
            continue  # the vision tower keeps the checkpoint's names: visual_targets
        prefix = _hf_prefix(mod_name)
        if isinstance(mod, Fused):
            for part, (start, rows) in mod.parts.items():
                out[f"{prefix}{part}.weight"] = Target(mod.weight, f"{mod_name}.weight", start, rows)
            continue
        for pname, p in mod.named_parameters(recurse=False):
            out[f"{prefix}{_hf_param_name(mod, pname)}"] = Target(p, f"{mod_name}.{pname}".lstrip("."))
    return out


def _hf_prefix(mod_name: str) -> str:
    """Our module path -> the checkpoint's (they agree except for the fused groups' parents)."""
    name = mod_name.replace(".qkv_proj", "").replace(".in_proj", "").replace(".gate_up", "")
    return f"{name}." if name else ""


def _hf_param_name(mod: nn.Module, pname: str) -> str:
    table: dict[type, dict[str, str]] = {
        Qwen35ForCausalLM: {"embed_tokens": "embed_tokens.weight", "norm": "norm.weight", "lm_head": "lm_head.weight"},
        DecoderLayer: {"input_layernorm": "input_layernorm.weight",
                       "post_attention_layernorm": "post_attention_layernorm.weight"},
        Attention: {"o_proj": "o_proj.weight", "q_norm": "q_norm.weight", "k_norm": "k_norm.weight"},
        GatedDeltaNet: {"conv_weight": "conv1d.weight", "A_log": "A_log", "dt_bias": "dt_bias",
                        "norm": "norm.weight", "out_proj": "out_proj.weight"},
        SparseMoE: {"router": "gate.weight", "experts_gate_up": "experts.gate_up_proj",
                    "experts_down": "experts.down_proj", "shared_expert_gate": "shared_expert_gate.weight"},
        MTPHead: {"pre_fc_norm_embedding": "pre_fc_norm_embedding.weight",
                  "pre_fc_norm_hidden": "pre_fc_norm_hidden.weight", "fc": "fc.weight", "norm": "norm.weight"},
    }  # fmt: skip
    for cls, names in table.items():
        if type(mod) is cls and pname in names:
            return names[pname]
    return f"{pname}.weight"  # MLP.down_proj


def expert_target(model: Qwen35ForCausalLM, name: str, source: str) -> Target | None:
    m = _EXPERT.match(name)
    if not m:
        return None
    try:
        moe = model.get_submodule(m.group(1))
    except AttributeError:
        moe = None
    if not isinstance(moe, SparseMoE):
        raise CheckpointError(f"{source}: unexpected tensor {name!r} (this config has no such MoE layer)")
    e, which = int(m.group(2)), m.group(3)
    if e >= moe.experts_down.shape[0]:
        raise CheckpointError(f"{source}: tensor {name!r}: expert {e} out of range (config has {moe.experts_down.shape[0]})")
    inter = moe.experts_down.shape[2]
    if which == "down_proj":
        return Target(moe.experts_down, f"{m.group(1)}.experts_down", expert=e)
    start = 0 if which == "gate_proj" else inter
    return Target(moe.experts_gate_up, f"{m.group(1)}.experts_gate_up", start, inter, expert=e)


def checkpoint_targets(model: Qwen35ForCausalLM) -> dict[str, Target]:
    """Checkpoint name -> where it goes, for every tensor but per-expert ones (resolved by `place_tensor`)."""
    return _module_targets(model)


def place_tensor(
    model: Qwen35ForCausalLM, targets: dict[str, Target], name: str, t: torch.Tensor, source: str
) -> str:
    """Copy one checkpoint tensor into its rows; returns the parameter written. CheckpointError on a name the
    config does not have or a wrong shape."""
    target = targets.get(name) or expert_target(model, name, source)
    if target is None:
        raise CheckpointError(f"{source}: unexpected tensor {name!r} (not part of this model's config)")
    dst = target.view()
    stored = list(t.shape)
    if name.endswith("conv1d.weight") and t.dim() == 3 and t.shape[1] == 1:
        t = t.squeeze(1)  # [C, 1, W] -> [C, W]
    if tuple(t.shape) != tuple(dst.shape):
        want = [dst.shape[0], 1, dst.shape[1]] if name.endswith("conv1d.weight") else list(dst.shape)
        raise CheckpointError(f"{source}: tensor {name!r} has shape {stored}, expected {want} for this config")
    with torch.no_grad():
        dst.copy_(t)
    return target.name


def load_weights(model: Qwen35ForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]], source: str = "checkpoint") -> None:
    """Copy every tensor into place; raise CheckpointError on unknown, misshapen, duplicate or missing tensors."""
    targets = checkpoint_targets(model)
    seen: dict[str, str] = {}  # checkpoint name -> parameter it wrote
    for name, t in tensors:
        if model.mtp is None and name.startswith("mtp."):
            continue  # config without MTP layers: ignore the head
        if model.lm_head is None and name == "lm_head.weight":
            continue  # tied embeddings: some writers still store the (identical) head
        if name in seen:
            raise CheckpointError(f"{source}: tensor {name!r} appears twice")
        seen[name] = place_tensor(model, targets, name, t, source)
    check_complete(model, targets, seen, source)


def check_complete(model: Qwen35ForCausalLM, targets: dict[str, Target], seen: dict[str, str], source: str) -> None:
    """Every non-expert tensor once; experts either fused or every per-expert tensor, never both."""
    for name in targets:
        if name in seen or ".experts." in name:
            continue
        raise CheckpointError(f"{source}: missing tensor {name!r}")
    for mod_name, mod in model.named_modules():
        if not isinstance(mod, SparseMoE):
            continue
        fused = [f"{mod_name}.experts.gate_up_proj", f"{mod_name}.experts.down_proj"]
        per = [f"{mod_name}.experts.{e}.{w}.weight" for e in range(mod.experts_down.shape[0])
               for w in ("gate_proj", "up_proj", "down_proj")]  # fmt: skip
        has_fused = [n for n in fused if n in seen]
        has_per = [n for n in per if n in seen]
        if has_fused and has_per:
            raise CheckpointError(f"{source}: {mod_name} has both fused and per-expert tensors ({has_fused[0]!r}, "
                                  f"{has_per[0]!r})")  # fmt: skip
        want = fused if has_fused or not has_per else per
        missing = [n for n in want if n not in seen]
        if missing:
            raise CheckpointError(f"{source}: missing tensor {missing[0]!r}")
