"""YaRN rope scaling: frequencies and attention factor equal transformers' for the real models' rope (partial
rotary 64 of 256, theta 1e7, factor 4 over 262,144 positions), config and `--rope-scaling` parsing, and the
model's logits past the original window (the `yarn` parity variant in hf_helpers; test_parity_hf runs it
with the other variants, here prefill + decode across the window's end)."""

from __future__ import annotations

from typing import Any

import hf_helpers as H
import pytest
import torch

from hinfer.config import ModelConfig, RopeScaling, apply_rope_scaling, parse_rope_scaling
from hinfer.errors import ConfigError
from hinfer.ops.rope import model_rope, rope_cos_sin, rope_inv_freq

pytest.importorskip("transformers")

FP32_ATOL = 1e-3  # as test_parity_hf: fp32 logits against transformers' full-sequence logits

CARD_ROPE = {
    "rope_type": "yarn",
    "rope_theta": 10_000_000,
    "partial_rotary_factor": 0.25,
    "factor": 4.0,
    "original_max_position_embeddings": 262144,
    "mrope_interleaved": True,
    "mrope_section": [11, 11, 10],
}


def _raw(rope: dict[str, Any] | None = None, **over: Any) -> dict[str, Any]:
    text = {"model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
            "intermediate_size": 96, "max_position_embeddings": 262144}  # fmt: skip
    if rope is not None:
        text["rope_parameters"] = rope
    return text | over


def test_inv_freq_and_factor_match_transformers() -> None:
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    raw = _raw(CARD_ROPE)
    ours = ModelConfig.from_dict(raw)
    hf = Qwen3_5TextRotaryEmbedding(Qwen3_5TextConfig(**{k: v for k, v in raw.items() if k != "model_type"}))
    inv, factor = model_rope(ours)
    assert torch.equal(inv, hf.inv_freq)
    assert factor == hf.attention_scaling
    # cos/sin of text positions (the three mrope streams equal) past the original window, fp32 and bf16
    pos = torch.tensor([0, 1, 262_143, 262_144, 700_001, 1_048_575])
    x = torch.zeros(1, dtype=torch.bfloat16)
    for dtype in (torch.float32, torch.bfloat16):
        cos, sin = hf(x.to(dtype), pos[None])
        c, s = rope_cos_sin(pos, inv, dtype, factor)
        assert torch.equal(c, cos[0]) and torch.equal(s, sin[0]), dtype


def test_config_reads_yarn() -> None:
    cfg = ModelConfig.from_dict(_raw(CARD_ROPE))
    assert cfg.rope_scaling == RopeScaling(4.0, 262144, attention_factor=pytest.approx(1.1386294361))
    assert cfg.max_position_embeddings == 1_048_576  # the scaled window
    # the older `rope_scaling` key with `type`, theta at the top level
    old = ModelConfig.from_dict(_raw(None, rope_theta=1e7, rope_scaling={"type": "yarn", "factor": 2.0}))
    assert old.rope_scaling is not None and old.rope_scaling.original_max_position_embeddings == 262144
    assert old.max_position_embeddings == 524288
    plain = ModelConfig.from_dict(_raw({"rope_type": "default", "rope_theta": 1e7}))
    assert plain.rope_scaling is None and plain.max_position_embeddings == 262144
    with pytest.raises(ConfigError, match="factor"):
        ModelConfig.from_dict(_raw({"rope_type": "yarn", "rope_theta": 1e7}))
    with pytest.raises(ConfigError, match="rope_type"):
        ModelConfig.from_dict(_raw({"rope_type": "linear", "rope_theta": 1e7, "factor": 2.0}))


def test_rope_scaling_flag() -> None:
    assert parse_rope_scaling("yarn:4") == ("yarn", 4.0)
    assert parse_rope_scaling("none") == ("none", None)
    for bad in ("yarn", "yarn:0.5", "linear:4", "yarn:x", "none:2"):
        with pytest.raises(ConfigError, match="--rope-scaling"):
            parse_rope_scaling(bad)
    plain = ModelConfig.from_dict(_raw({"rope_type": "default", "rope_theta": 1e7}))
    assert apply_rope_scaling(plain, None) is plain
    on = apply_rope_scaling(plain, "yarn:4")
    assert on == ModelConfig.from_dict(_raw(CARD_ROPE))  # the flag gives what the model card's config gives
    assert on.max_position_embeddings == 1_048_576
    off = apply_rope_scaling(on, "none")
    assert off.rope_scaling is None and off.max_position_embeddings == 262144
    assert apply_rope_scaling(on, "yarn:2").max_position_embeddings == 524288  # the original window stays


def test_prefill_then_decode_past_original_window(tmp_path) -> None:
    """Prefill to position 60 (inside the 64-position window), then decode across its end and on to 4x it."""
    with H.one_thread():
        hf = H.build_hf_model("yarn", seed=0)
        ours = H.load_ours(H.save_hf(hf, tmp_path / "yarn"))
        assert ours.cfg.rope_scaling is not None and ours.cfg.max_position_embeddings == 512
        n, m = 60, 200
        ids = H.prompt(n + m, seed=11)
        want = H.hf_logits(hf, ids)
        s = H.Session(ours, max_tokens=n + m)
        sid = s.new_seq()
        got = [s.step([(sid, ids[:n])])[0]]
        got += [s.step([(sid, [t])])[0] for t in ids[n:]]
        err = (torch.cat(got) - want).abs().max().item()
        assert err <= FP32_ATOL, err
        # and the scaling matters here: the same weights without it disagree past the window
        plain = H.load_ours(tmp_path / "yarn")

        for layer in plain.layers:
            if layer.kind == "full_attention":
                layer.self_attn.inv_freq = rope_inv_freq(ours.cfg.rotary_dim, ours.cfg.rope_theta)
                layer.self_attn.attn_factor = 1.0
        diff = (H.our_logits(plain, ids) - want).abs().max().item()
        assert diff > 100 * FP32_ATOL, diff
