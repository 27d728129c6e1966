"""Synthetic checkpoints load into Hugging Face transformers with every text weight found (names, shapes,
per-expert MoE conversion) and give finite, non-trivial logits through all layers."""

from __future__ import annotations

import json

import pytest
import torch

from hinfer.weights.synth import write_synthetic_checkpoint

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_transformers_loads_synthetic_checkpoint(fx, tmp_path, tiny_dense, tiny_moe, kind):
    if kind == "dense":
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForConditionalGeneration as Model
        src, over = fx.dense, tiny_dense
    else:
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (
            Qwen3_5MoeForConditionalGeneration as Model,
        )
        src, over = fx.moe, tiny_moe
    ck = write_synthetic_checkpoint(src, tmp_path / "ck", layers=8, overrides=over, tokenizer_dir=fx.tokenizer,
                                    progress=False)
    # the vision tower is never in our checkpoints; shrink it so building the model is cheap
    cfg_path = ck / "config.json"
    raw = json.loads(cfg_path.read_text())
    raw["vision_config"].update(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    cfg_path.write_text(json.dumps(raw))
    transformers.logging.set_verbosity_error()
    model, info = Model.from_pretrained(ck, dtype=torch.float32, output_loading_info=True)
    assert [k for k in info["missing_keys"] if not k.startswith("model.visual.")] == []
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    assert bool(out.logits.isfinite().all())
    assert 0.3 < out.logits.std().item() < 3.0
    for h in out.hidden_states:  # residual stream stays near unit scale, nowhere dead or exploding
        assert 0.3 < h.std().item() < 5.0


def test_transformers_loads_the_synthetic_vision_tower(fx, tmp_path, tiny_dense):
    """--vision: the tower's tensors (names, shapes) are the ones transformers' Qwen3.5 vision model expects, and
    our loader reads them back into a model that encodes an image."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForConditionalGeneration

    from hinfer.config import load_model_config
    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.model.vision import VisionEncoder
    from hinfer.model.vision_loader import load_vision_weights
    from hinfer.weights.hf_reader import HFCheckpoint

    tiny_vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
    ck = write_synthetic_checkpoint(fx.dense, tmp_path / "ck", layers=4, overrides=tiny_dense, progress=False,
                                    tokenizer_dir=fx.tokenizer, vision=True, vision_overrides=tiny_vision)
    transformers.logging.set_verbosity_error()
    hf, info = Qwen3_5ForConditionalGeneration.from_pretrained(ck, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    cfg = load_model_config(ck)
    ours = Qwen35ForCausalLM(cfg, torch.float32, with_vision=False)
    ours.visual = VisionEncoder(cfg.vision, torch.float32)
    load_vision_weights(ours.visual, HFCheckpoint(ck).iter_visual(torch.float32))
    pixels = torch.rand(64, cfg.vision.patch_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        want = hf.model.visual(pixels, grid_thw=torch.tensor([[1, 8, 8]])).pooler_output
    got = ours.encode_images(pixels, [(1, 8, 8)])
    assert got.shape == (16, 64) and 0.1 < got.std().item() < 10
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_vision_needs_a_vision_config(fx, tmp_path, tiny_dense, text_config_from):
    from hinfer.errors import ConfigError

    with pytest.raises(ConfigError, match="vision_config"):
        write_synthetic_checkpoint(text_config_from(fx.dense), tmp_path / "ck", layers=4, overrides=tiny_dense,
                                   progress=False, vision=True)
