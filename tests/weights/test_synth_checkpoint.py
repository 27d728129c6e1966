"""write_synthetic_checkpoint: config handling, side files, sharding, determinism and value scales."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hinfer.config import load_model_config
from hinfer.errors import CheckpointError
from hinfer.fixtures import tokenizer_dir
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.synth import write_synthetic_checkpoint


def synth(src: Path, out: Path, overrides: dict, tok: Path, **kw) -> Path:
    kw.setdefault("layers", 4)
    return write_synthetic_checkpoint(src, out, overrides=overrides, tokenizer_dir=tok, progress=False, **kw)


def _keys(d: dict) -> list[str]:
    return list(d)


def test_config_keeps_layout_and_applies_overrides(fx, tmp_path, tiny_dense):
    src_text = (fx.dense / "config.json").read_text()
    src = json.loads(src_text)
    ck = synth(fx.dense, tmp_path / "ck", tiny_dense, fx.tokenizer, layers=6)
    out_text = (ck / "config.json").read_text()
    out = json.loads(out_text)
    assert _keys(out) == _keys(src) and _keys(out["text_config"]) == _keys(src["text_config"])
    assert out["vision_config"] == src["vision_config"]
    assert out_text.splitlines()[1].startswith('    "')  # the fixture's 4-space layout
    t = out["text_config"]
    assert t["hidden_size"] == 64 and t["num_hidden_layers"] == 6
    assert t["layer_types"] == src["text_config"]["layer_types"][:6]
    assert "quantization_config" not in out
    cfg = load_model_config(ck)
    assert cfg.num_hidden_layers == 6 and cfg.attn_layers == [3]


@pytest.mark.parametrize(("layers", "expect"), [
    (1, ["full_attention"]),
    (2, ["linear_attention", "full_attention"]),
    (3, ["linear_attention", "linear_attention", "full_attention"]),
    (5, ["linear_attention"] * 3 + ["full_attention", "linear_attention"]),
])
def test_truncation_keeps_a_full_attention_layer(fx, tmp_path, tiny_dense, layers, expect):
    ck = synth(fx.dense, tmp_path / "ck", tiny_dense, fx.tokenizer, layers=layers)
    assert list(load_model_config(ck).layer_types) == expect


def test_text_type_overrides_top_level_and_tied(fx, tmp_path, tiny_dense, text_config_from):
    ck = synth(text_config_from(fx.dense), tmp_path / "ck", {**tiny_dense, "tie_word_embeddings": True},
               fx.tokenizer)
    raw = json.loads((ck / "config.json").read_text())
    assert raw["model_type"] == "qwen3_5_text" and raw["hidden_size"] == 64 and "text_config" not in raw
    names = HFCheckpoint(ck).tensor_names()
    assert "lm_head.weight" not in names and "embed_tokens.weight" in names
    wrapped = synth(fx.dense, tmp_path / "ck2", {**tiny_dense, "tie_word_embeddings": True}, fx.tokenizer)
    raw = json.loads((wrapped / "config.json").read_text())
    assert raw["tie_word_embeddings"] is True and raw["text_config"]["tie_word_embeddings"] is True


def test_side_files(fx, tmp_path, tiny_dense, tiny_moe):
    moe = synth(fx.moe, tmp_path / "moe", tiny_moe, fx.tokenizer)
    assert (moe / "generation_config.json").read_bytes() == (fx.moe / "generation_config.json").read_bytes()
    dense = synth(fx.dense, tmp_path / "dense", tiny_dense, fx.tokenizer)
    gen = json.loads((dense / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044}
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (dense / f).read_bytes() == (fx.tokenizer / f).read_bytes()
    with pytest.raises(CheckpointError, match="tokenizer files missing"):
        synth(fx.dense, tmp_path / "bad", tiny_dense, tmp_path / "nowhere")


def test_default_tokenizer_dir(fx, tmp_path, tiny_dense, monkeypatch):
    monkeypatch.setenv("HINFER_FIXTURES", str(fx.root))
    ck = write_synthetic_checkpoint(fx.dense, tmp_path / "env", layers=2, overrides=tiny_dense, progress=False)
    assert (ck / "chat_template.jinja").read_bytes() == (fx.tokenizer / "chat_template.jinja").read_bytes()
    monkeypatch.delenv("HINFER_FIXTURES")  # then the tokenizer packaged with hinfer
    ck = write_synthetic_checkpoint(fx.dense, tmp_path / "pkg", layers=2, overrides=tiny_dense, progress=False)
    assert (ck / "tokenizer.json").read_bytes() == (tokenizer_dir() / "tokenizer.json").read_bytes()


def test_sharding_and_determinism(fx, tmp_path, tiny_dense):
    a = synth(fx.dense, tmp_path / "a", tiny_dense, fx.tokenizer, shard_bytes=50_000)
    b = synth(fx.dense, tmp_path / "b", tiny_dense, fx.tokenizer, shard_bytes=10**9)
    c = synth(fx.dense, tmp_path / "c", tiny_dense, fx.tokenizer, seed=1)
    shards = sorted(a.glob("model-*.safetensors"))
    n = len(shards)
    assert n > 2 and [s.name for s in shards] == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    index = json.loads((a / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {s.name for s in shards}
    # a shard only exceeds the limit when one tensor alone does (the 512x64 embedding is 65,536 bytes)
    sizes = {s.name: s.stat().st_size for s in shards}
    assert sum(v > 60_000 for v in sizes.values()) <= 2
    ta = dict(HFCheckpoint(a).iter_tensors(progress=False))
    tb = dict(HFCheckpoint(b).iter_tensors(progress=False))
    tc = dict(HFCheckpoint(c).iter_tensors(progress=False))
    assert all(torch.equal(ta[k], tb[k]) for k in ta)  # values do not depend on sharding
    assert not torch.equal(ta["layers.0.linear_attn.in_proj_qkv.weight"], tc["layers.0.linear_attn.in_proj_qkv.weight"])
    # rewriting into the same folder leaves no stale shards behind
    synth(fx.dense, a, tiny_dense, fx.tokenizer, shard_bytes=10**9)
    assert len(list(a.glob("model-*.safetensors"))) == 1
    HFCheckpoint(a)


def test_value_scales(fx, tmp_path, tiny_moe):
    over = {**tiny_moe, "hidden_size": 256, "moe_intermediate_size": 128}
    ck = synth(fx.moe, tmp_path / "ck", over, fx.tokenizer)
    t = {n: v.float() for n, v in HFCheckpoint(ck).iter_tensors(progress=False)}
    assert all(bool(v.isfinite().all()) for v in t.values())
    assert t["embed_tokens.weight"].std() == pytest.approx(1.0, rel=0.05)
    assert t["layers.0.input_layernorm.weight"].std() == pytest.approx(0.1, rel=0.2)
    assert t["norm.weight"].mean().abs() < 0.03
    assert t["layers.0.linear_attn.norm.weight"].mean() == pytest.approx(1.0, abs=0.05)
    a = t["layers.0.linear_attn.A_log"].exp()
    assert bool(((a >= 0.49) & (a <= 4.01)).all())
    assert t["layers.0.linear_attn.dt_bias"].mean() == pytest.approx(-1.0, abs=0.15)
    assert t["layers.0.linear_attn.in_proj_qkv.weight"].std() == pytest.approx(1 / math.sqrt(256), rel=0.05)
    assert t["layers.0.linear_attn.out_proj.weight"].std() == pytest.approx(0.5 / math.sqrt(64), rel=0.05)
    assert t["layers.3.self_attn.o_proj.weight"].std() == pytest.approx(0.5 / math.sqrt(64), rel=0.1)
    assert t["layers.0.mlp.experts.7.down_proj.weight"].std() == pytest.approx(0.5 / math.sqrt(128), rel=0.05)
    assert t["layers.0.mlp.gate.weight"].std() == pytest.approx(1 / math.sqrt(256), rel=0.1)
    assert t["mtp.fc.weight"].std() == pytest.approx(1 / math.sqrt(512), rel=0.05)
    assert t["layers.0.linear_attn.conv1d.weight"].std() == pytest.approx(0.5, rel=0.05)


def test_fused_and_per_expert_hold_the_same_values(fx, tmp_path, tiny_moe):
    per = dict(HFCheckpoint(synth(fx.moe, tmp_path / "p", tiny_moe, fx.tokenizer)).iter_tensors(progress=False))
    fused = synth(fx.moe, tmp_path / "f", tiny_moe, fx.tokenizer, fused_experts=True)
    fused = dict(HFCheckpoint(fused).iter_tensors(progress=False))
    gate_up = fused["layers.1.mlp.experts.gate_up_proj"]
    for e in (0, 7):
        want = torch.cat([per[f"layers.1.mlp.experts.{e}.gate_proj.weight"], per[f"layers.1.mlp.experts.{e}.up_proj.weight"]])
        assert torch.equal(gate_up[e], want)
        assert torch.equal(fused["layers.1.mlp.experts.down_proj"][e], per[f"layers.1.mlp.experts.{e}.down_proj.weight"])
