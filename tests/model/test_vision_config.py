"""VisionConfig from the released configs, and clear errors for what the vision tower does not run."""

from __future__ import annotations

import copy
import json

import pytest

from hinfer.config import ModelConfig
from hinfer.errors import ConfigError
from hinfer.fixtures import config_dir
from hinfer.vision_config import VisionConfig

RELEASED = ["qwen3.5-0.8b", "qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b"]


def _raw(name: str) -> dict:
    path = config_dir(name)
    assert path is not None
    return json.loads((path / "config.json").read_text())


@pytest.mark.parametrize("name", RELEASED)
def test_released_configs_have_a_vision_tower(name: str) -> None:
    cfg = ModelConfig.from_dict(_raw(name))
    v = cfg.vision
    assert v is not None
    assert v.out_hidden_size == cfg.hidden_size
    assert (v.patch_size, v.spatial_merge_size, v.temporal_patch_size, v.grid_side) == (16, 2, 2, 48)
    assert v.image_token_id == 248056 and v.vision_start_token_id == 248053
    assert cfg.mrope_section == (11, 11, 10)
    assert sum(cfg.mrope_section) == cfg.rotary_dim // 2


def test_text_only_config_has_none() -> None:
    raw = _raw("qwen3.5-0.8b")
    text = dict(raw["text_config"], model_type="qwen3_5_text")
    assert ModelConfig.from_dict(text).vision is None
    assert VisionConfig.from_dict({}) is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"deepstack_visual_indexes": [3]}, "deepstack"),
        ({"hidden_act": "silu"}, "hidden_act"),
        ({"num_position_embeddings": 2300}, "square"),
        ({"patch_size": [16, 14]}, "one size"),
    ],
)
def test_unsupported_vision_configs_are_refused(change: dict, message: str) -> None:
    raw = copy.deepcopy(_raw("qwen3.5-0.8b"))
    raw["vision_config"].update(change)
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict(raw)


def test_tower_must_project_into_the_text_width() -> None:
    import torch

    from hinfer.model.qwen3_5 import Qwen35ForCausalLM

    raw = copy.deepcopy(_raw("qwen3.5-0.8b"))
    raw["vision_config"]["out_hidden_size"] = 7
    cfg = ModelConfig.from_dict(raw)  # fine for a text-only run
    with pytest.raises(ConfigError, match="out_hidden_size 7"):
        Qwen35ForCausalLM(cfg, dtype=torch.float32, device="meta", with_vision=True)
