"""hf_tensor_specs: names and shapes of the released checkpoints, prefixes, MoE layouts, FP8 layout."""

from __future__ import annotations

import json
import math

import torch

from hinfer.config import ModelConfig, load_model_config
from hinfer.weights.hf_layout import (
    default_modules_to_not_convert,
    hf_tensor_specs,
    not_converted,
    strip_prefix,
)


def _cfg(src, **text_overrides) -> ModelConfig:
    raw = json.loads((src / "config.json").read_text())
    raw["text_config"].update(text_overrides)
    return ModelConfig.from_dict(raw)


def test_27b_specs_equal_reference_listing(fx):
    ref = json.loads(fx.reference_27b.read_text())["tensors"]
    ref = {n: r for n, r in ref.items() if not n.startswith("model.visual.")}
    specs = hf_tensor_specs(load_model_config(fx.dense))
    assert set(specs) == set(ref)
    for name, r in ref.items():
        assert list(specs[name].shape) == r["shape"], name
        assert specs[name].dtype == torch.bfloat16 and r["dtype"] == "BF16", name
    assert len(specs) == 866  # 1,199 listed minus 333 visual


def test_prefix_follows_model_type(fx, text_config_from):
    wrapped = hf_tensor_specs(load_model_config(fx.dense))
    text = hf_tensor_specs(load_model_config(text_config_from(fx.dense)))
    assert "model.language_model.embed_tokens.weight" in wrapped
    assert "model.embed_tokens.weight" in text
    assert {strip_prefix(n) for n in wrapped} == {strip_prefix(n) for n in text}
    assert all(n.startswith(("model.", "lm_head.", "mtp.")) for n in text)


def test_tied_has_no_lm_head_and_mtp_optional(fx):
    cfg = load_model_config(fx.tied)
    assert cfg.tie_word_embeddings
    specs = hf_tensor_specs(cfg)
    assert "lm_head.weight" not in specs
    assert "mtp.fc.weight" in specs
    assert not any(n.startswith("mtp.") for n in hf_tensor_specs(cfg, include_mtp=False))


def test_moe_per_expert_and_fused(fx):
    cfg = load_model_config(fx.moe)
    e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
    per = hf_tensor_specs(cfg)
    fused = hf_tensor_specs(cfg, fused_experts=True)
    p = "model.language_model.layers.0.mlp"
    assert per[f"{p}.gate.weight"].shape == (e, h)
    assert per[f"{p}.experts.255.gate_proj.weight"].shape == (i, h)
    assert per[f"{p}.experts.0.down_proj.weight"].shape == (h, i)
    assert per[f"{p}.shared_expert_gate.weight"].shape == (1, h)
    assert per[f"{p}.shared_expert.down_proj.weight"].shape == (h, cfg.shared_expert_intermediate_size)
    assert fused[f"{p}.experts.gate_up_proj"].shape == (e, 2 * i, h)
    assert fused[f"{p}.experts.down_proj"].shape == (e, h, i)
    assert not any(".experts.0." in n for n in fused)
    # the MTP layer uses the model's MLP kind
    assert "mtp.layers.0.mlp.experts.gate_up_proj" in fused and "mtp.layers.0.self_attn.q_proj.weight" in fused
    n_per = sum(math.prod(s.shape) for s in per.values())
    assert n_per == sum(math.prod(s.shape) for s in fused.values())


def test_fp8_specs(fx):
    cfg = _cfg(fx.moe, hidden_size=136, moe_intermediate_size=200, num_experts=4)
    specs = hf_tensor_specs(cfg, fp8=True, fused_experts=True)
    p = "model.language_model.layers.0"
    w = specs[f"{p}.mlp.experts.gate_up_proj"]
    assert w.dtype == torch.float8_e4m3fn and w.shape == (4, 400, 136)
    s = specs[f"{p}.mlp.experts.gate_up_proj_scale_inv"]
    assert s.dtype == torch.float32 and s.shape == (4, 4, 2)
    assert specs[f"{p}.linear_attn.in_proj_qkv.weight_scale_inv"].shape == (math.ceil(cfg.gdn_conv_dim / 128), 2)
    for kept in ("model.language_model.embed_tokens.weight", "lm_head.weight", "mtp.fc.weight",
                 f"{p}.linear_attn.in_proj_a.weight", f"{p}.linear_attn.in_proj_b.weight",
                 f"{p}.mlp.gate.weight", f"{p}.mlp.shared_expert_gate.weight", f"{p}.input_layernorm.weight",
                 f"{p}.linear_attn.conv1d.weight", f"{p}.linear_attn.A_log"):
        assert specs[kept].dtype == torch.bfloat16, kept
        assert kept + "_scale_inv" not in specs
    per = hf_tensor_specs(cfg, fp8=True, fp8_block=(64, 32))
    assert per[f"{p}.mlp.experts.3.down_proj.weight_scale_inv"].shape == (3, 7)  # 136x200
    # an explicit list overrides the default
    none_kept = hf_tensor_specs(cfg, fp8=True, modules_to_not_convert=[])
    assert none_kept["lm_head.weight"].dtype == torch.float8_e4m3fn


def test_default_not_convert_list(fx):
    cfg = load_model_config(fx.dense)
    skip = default_modules_to_not_convert(cfg)
    assert {"lm_head", "model.language_model.embed_tokens", "model.visual", "mtp.fc"} <= set(skip)
    assert "model.language_model.layers.0.linear_attn.in_proj_a" in skip
    assert not any("layers.3.linear_attn" in s for s in skip)  # layer 3 is full attention


def test_not_converted_matches_like_transformers():
    pats = ["model.language_model.layers.1.mlp.gate", "lm_head", "shared_expert_gate", "model.visual"]
    assert not_converted("model.language_model.layers.1.mlp.gate", pats)
    assert not not_converted("model.language_model.layers.1.mlp.gate_proj", pats)  # module boundary
    assert not not_converted("model.language_model.layers.11.mlp.gate", pats)
    assert not_converted("model.language_model.layers.7.mlp.shared_expert_gate", pats)  # suffix
    assert not_converted("model.visual.blocks.0.attn.qkv", pats)  # prefix
    assert not_converted("model.language_model.layers.5.mlp.gate", [r"model.language_model.layers.\d+.mlp.gate"])
    assert not not_converted("lm_head", None) and not not_converted("lm_head", [])
    assert not_converted("a.b(", ["a.b("])  # invalid regex falls back to a plain prefix


def test_27b_visual_specs_equal_reference_listing(fx):
    from hinfer.weights.visual_layout import visual_tensor_specs

    ref = json.loads(fx.reference_27b.read_text())["tensors"]
    ref = {n: r for n, r in ref.items() if n.startswith("model.visual.")}
    cfg = load_model_config(fx.dense)
    assert cfg.vision is not None
    specs = visual_tensor_specs(cfg.vision)
    assert set(specs) == set(ref) and len(specs) == 333
    for name, r in ref.items():
        assert list(specs[name].shape) == r["shape"] and r["dtype"] == "BF16", name
    assert sum(math.prod(s.shape) for s in specs.values()) == cfg.vision.param_count
