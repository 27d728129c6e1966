"""Names, shapes and dtypes of every text-model tensor of a Hugging Face Qwen3.5 checkpoint.

Prefixes are those of the released checkpoints: `model.language_model.` for the multimodal-wrapper types
(`qwen3_5`, `qwen3_5_moe`) and `model.` for the `*_text` types; `lm_head.weight` (absent when tied) and
`mtp.*` are top level. The vision tower's tensors (`model.visual.*`) are listed apart
(hinfer/weights/visual_layout.py).

MoE experts come either per expert (`mlp.experts.{e}.{gate,up,down}_proj.weight`, the released layout) or
fused as transformers >= 5 keeps them in memory (`mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I]).

FP8 (official Qwen FP8 checkpoints): every converted Linear stores `weight` as float8_e4m3fn plus
`weight_scale_inv` float32 [ceil(out/128), ceil(in/128)] (fused experts: `gate_up_proj` +
`gate_up_proj_scale_inv` [E, ...]), and config.json carries `quantization_config`:
{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
"modules_to_not_convert": [...]}.

Our modules_to_not_convert (`default_modules_to_not_convert`), explicit full module names like the
official lists:
- `embed_tokens` and `lm_head`: a gather and the logits GEMM; quantizing them costs accuracy on every token
  and (embedding) saves no bandwidth at decode.
- GDN `in_proj_a` / `in_proj_b`: tiny ([HV, H], HV=48 is not a multiple of 128) and they feed the decay
  and beta gates, where an error compounds through the recurrence.
- MoE router `mlp.gate` and `mlp.shared_expert_gate`: tiny, and routing decisions flip on small errors.
- `mtp.fc`: one matrix whose input concatenates two separately normalised streams; bf16 costs little.
- `model.visual` (wrapper types only): the vision tower stays bf16.
Norms, `conv1d`, `A_log` and `dt_bias` are not Linear layers, so an FP8 conversion never touches them
(as in transformers, which converts only nn.Linear); they are not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from hinfer.config import ModelConfig
from hinfer.errors import ConfigError
from hinfer.quant.fp8_block import DEFAULT_BLOCK, FP8_DTYPE, scale_shape

# Roles tell synth how to initialise a tensor and fp8 which tensors are Linear weights.
LINEAR_ROLES = frozenset({"linear", "linear_out", "lm_head", "router", "gate_scalar", "mtp_fc"})
EXPERT_ROLES = frozenset({"experts_in", "experts_out"})  # fused [E, out, in] Linear stacks


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    role: str = ""  # embed, norm, gdn_norm, conv1d, A_log, dt_bias, fp8_scale or one of the Linear roles

    @property
    def is_linear(self) -> bool:
        return self.role in LINEAR_ROLES or self.role in EXPERT_ROLES


def checkpoint_prefix(model_type: str) -> str:
    """Prefix of the language model's tensors in a released checkpoint of this model type."""
    return "model." if model_type.endswith("_text") else "model.language_model."


def strip_prefix(name: str) -> str:
    """`model.language_model.X` / `model.X` -> `X`; anything else (lm_head, mtp.*) unchanged."""
    for p in ("model.language_model.", "model."):
        if name.startswith(p):
            return name[len(p):]
    return name


def module_name(tensor_name: str) -> str:
    """The module a parameter belongs to (`a.b.weight` -> `a.b`, `x.experts.gate_up_proj` -> `x.experts`)."""
    return tensor_name.rsplit(".", 1)[0]


def not_converted(module: str, patterns: list[str] | None) -> bool:
    """transformers' rule (quantizers_utils.should_convert_module): a pattern skips `module` when it
    matches from the start up to a module boundary (as a regex) or is a suffix of the name."""
    if not patterns:
        return False
    return any(_pattern_match(p, module) or module.endswith(p) for p in patterns)


def _pattern_match(pattern: str, module: str) -> bool:
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    try:
        return re.match(rf"(?:{pattern}){boundary}", module) is not None
    except re.error:  # not a valid regex: fall back to a plain prefix up to a module boundary
        return module == pattern or module.startswith(pattern + ".")


def dense_intermediate_size(cfg: ModelConfig) -> int:
    if cfg.intermediate_size:
        return cfg.intermediate_size
    raw = cfg.extra.get("raw", {})
    size = raw.get("text_config", raw).get("intermediate_size")
    if not size:
        raise ConfigError("config.json: mlp_only_layers needs intermediate_size for the dense MLP layers")
    return int(size)


def _mlp(out: dict[str, TensorSpec], p: str, cfg: ModelConfig, moe: bool, fused: bool, dt: torch.dtype) -> None:
    h = cfg.hidden_size
    if not moe:
        i = dense_intermediate_size(cfg)
        out[f"{p}.gate_proj.weight"] = TensorSpec((i, h), dt, "linear")
        out[f"{p}.up_proj.weight"] = TensorSpec((i, h), dt, "linear")
        out[f"{p}.down_proj.weight"] = TensorSpec((h, i), dt, "linear_out")
        return
    e, i, si = cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size
    out[f"{p}.gate.weight"] = TensorSpec((e, h), dt, "router")
    if fused:
        out[f"{p}.experts.gate_up_proj"] = TensorSpec((e, 2 * i, h), dt, "experts_in")
        out[f"{p}.experts.down_proj"] = TensorSpec((e, h, i), dt, "experts_out")
    else:
        for x in range(e):
            out[f"{p}.experts.{x}.gate_proj.weight"] = TensorSpec((i, h), dt, "linear")
            out[f"{p}.experts.{x}.up_proj.weight"] = TensorSpec((i, h), dt, "linear")
            out[f"{p}.experts.{x}.down_proj.weight"] = TensorSpec((h, i), dt, "linear_out")
    out[f"{p}.shared_expert.gate_proj.weight"] = TensorSpec((si, h), dt, "linear")
    out[f"{p}.shared_expert.up_proj.weight"] = TensorSpec((si, h), dt, "linear")
    out[f"{p}.shared_expert.down_proj.weight"] = TensorSpec((h, si), dt, "linear_out")
    out[f"{p}.shared_expert_gate.weight"] = TensorSpec((1, h), dt, "gate_scalar")


def _attention(out: dict[str, TensorSpec], p: str, cfg: ModelConfig, dt: torch.dtype) -> None:
    h, hd = cfg.hidden_size, cfg.head_dim
    q_dim, kv_dim = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    out[f"{p}.q_proj.weight"] = TensorSpec((2 * q_dim, h), dt, "linear")  # query and output gate
    out[f"{p}.k_proj.weight"] = TensorSpec((kv_dim, h), dt, "linear")
    out[f"{p}.v_proj.weight"] = TensorSpec((kv_dim, h), dt, "linear")
    out[f"{p}.o_proj.weight"] = TensorSpec((h, q_dim), dt, "linear_out")
    out[f"{p}.q_norm.weight"] = TensorSpec((hd,), dt, "norm")
    out[f"{p}.k_norm.weight"] = TensorSpec((hd,), dt, "norm")


def _gdn(out: dict[str, TensorSpec], p: str, cfg: ModelConfig, dt: torch.dtype) -> None:
    h, hv = cfg.hidden_size, cfg.linear_num_value_heads
    out[f"{p}.in_proj_qkv.weight"] = TensorSpec((cfg.gdn_conv_dim, h), dt, "linear")
    out[f"{p}.in_proj_z.weight"] = TensorSpec((cfg.gdn_value_dim, h), dt, "linear")
    out[f"{p}.in_proj_b.weight"] = TensorSpec((hv, h), dt, "linear")
    out[f"{p}.in_proj_a.weight"] = TensorSpec((hv, h), dt, "linear")
    out[f"{p}.conv1d.weight"] = TensorSpec((cfg.gdn_conv_dim, 1, cfg.linear_conv_kernel_dim), dt, "conv1d")
    out[f"{p}.dt_bias"] = TensorSpec((hv,), dt, "dt_bias")
    out[f"{p}.A_log"] = TensorSpec((hv,), dt, "A_log")
    out[f"{p}.norm.weight"] = TensorSpec((cfg.linear_value_head_dim,), dt, "gdn_norm")
    out[f"{p}.out_proj.weight"] = TensorSpec((h, cfg.gdn_value_dim), dt, "linear_out")


def _decoder_layer(out: dict[str, TensorSpec], p: str, cfg: ModelConfig, kind: str, moe: bool,
                   fused: bool, dt: torch.dtype) -> None:
    h = cfg.hidden_size
    out[f"{p}.input_layernorm.weight"] = TensorSpec((h,), dt, "norm")
    if kind == "full_attention":
        _attention(out, f"{p}.self_attn", cfg, dt)
    else:
        _gdn(out, f"{p}.linear_attn", cfg, dt)
    out[f"{p}.post_attention_layernorm.weight"] = TensorSpec((h,), dt, "norm")
    _mlp(out, f"{p}.mlp", cfg, moe, fused, dt)


def _bf16_layout(cfg: ModelConfig, fused: bool, include_mtp: bool, dt: torch.dtype) -> dict[str, TensorSpec]:
    pre, h = checkpoint_prefix(cfg.model_type), cfg.hidden_size
    out: dict[str, TensorSpec] = {f"{pre}embed_tokens.weight": TensorSpec((cfg.vocab_size, h), dt, "embed")}
    for i, kind in enumerate(cfg.layer_types):
        _decoder_layer(out, f"{pre}layers.{i}", cfg, kind, cfg.layer_is_moe(i), fused, dt)
    out[f"{pre}norm.weight"] = TensorSpec((h,), dt, "norm")
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = TensorSpec((cfg.vocab_size, h), dt, "lm_head")
    if include_mtp and cfg.mtp_num_hidden_layers > 0:
        out["mtp.fc.weight"] = TensorSpec((h, 2 * h), dt, "mtp_fc")
        for j in range(cfg.mtp_num_hidden_layers):
            _decoder_layer(out, f"mtp.layers.{j}", cfg, "full_attention", cfg.is_moe, fused, dt)
        out["mtp.norm.weight"] = TensorSpec((h,), dt, "norm")
        out["mtp.pre_fc_norm_embedding.weight"] = TensorSpec((h,), dt, "norm")
        out["mtp.pre_fc_norm_hidden.weight"] = TensorSpec((h,), dt, "norm")
    return out


def default_modules_to_not_convert(cfg: ModelConfig, *, include_mtp: bool = True) -> list[str]:
    """The modules our FP8 checkpoints keep in bf16 (see the module docstring for why)."""
    pre = checkpoint_prefix(cfg.model_type)
    keep = [f"{pre}embed_tokens", "lm_head"]
    if pre == "model.language_model.":
        keep.append("model.visual")
    layers = [(f"{pre}layers.{i}", kind, cfg.layer_is_moe(i)) for i, kind in enumerate(cfg.layer_types)]
    if include_mtp and cfg.mtp_num_hidden_layers > 0:
        keep.append("mtp.fc")
        layers += [(f"mtp.layers.{j}", "full_attention", cfg.is_moe) for j in range(cfg.mtp_num_hidden_layers)]
    for p, kind, moe in layers:
        if kind == "linear_attention":
            keep += [f"{p}.linear_attn.in_proj_a", f"{p}.linear_attn.in_proj_b"]
        if moe:
            keep += [f"{p}.mlp.gate", f"{p}.mlp.shared_expert_gate"]
    return keep


def fp8_scale_name(tensor_name: str) -> str:
    """`x.weight` -> `x.weight_scale_inv`; fused `x.experts.gate_up_proj` -> `x.experts.gate_up_proj_scale_inv`."""
    return f"{tensor_name}_scale_inv"


def hf_tensor_specs(
    cfg: ModelConfig,
    *,
    fp8: bool = False,
    fused_experts: bool = False,
    include_mtp: bool = True,
    dtype: torch.dtype = torch.bfloat16,
    fp8_block: tuple[int, int] = DEFAULT_BLOCK,
    modules_to_not_convert: list[str] | None = None,
) -> dict[str, TensorSpec]:
    """Every text-model tensor of the checkpoint, full names, in model order. With fp8, each converted
    Linear weight becomes float8_e4m3fn followed by its float32 `*_scale_inv`."""
    base = _bf16_layout(cfg, fused_experts, include_mtp, dtype)
    if not fp8:
        return base
    skip = default_modules_to_not_convert(cfg, include_mtp=include_mtp) if modules_to_not_convert is None \
        else modules_to_not_convert
    out: dict[str, TensorSpec] = {}
    for name, spec in base.items():
        if spec.is_linear and not not_converted(module_name(name), skip):
            out[name] = TensorSpec(spec.shape, FP8_DTYPE, spec.role)
            out[fp8_scale_name(name)] = TensorSpec(scale_shape(spec.shape, fp8_block), torch.float32, "fp8_scale")
        else:
            out[name] = spec
    return out


def fp8_quantization_config(modules_to_not_convert: list[str],
                            block: tuple[int, int] = DEFAULT_BLOCK) -> dict:
    """The `quantization_config` entry of an official-layout FP8 config.json."""
    return {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": list(block),
        "modules_to_not_convert": list(modules_to_not_convert),
    }
