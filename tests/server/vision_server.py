"""A tiny random multimodal model with the real tokenizer behind a live server, and test images: shared by the
vision server tests."""

from __future__ import annotations

import base64
import copy
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from PIL import Image
from server_live import live_server

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.engine import Engine
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import config_dir, fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.tokenizer import Tokenizer

MODEL = "tiny-vision"
TEXT = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "intermediate_size": 96, "mtp_num_hidden_layers": 0}  # fmt: skip
# real patch size and merge, so images take as many tokens as on the released models (at least 64)
VISION = {"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 48, "out_hidden_size": 64,
          "num_position_embeddings": 64}  # fmt: skip
IMAGE_TOKENS = 64


def vision_config() -> ModelConfig:
    path = config_dir("qwen3.5-0.8b")
    assert path is not None
    raw = copy.deepcopy(json.loads((path / "config.json").read_text()))
    raw["text_config"].update(TEXT)
    raw["text_config"].pop("layer_types", None)
    raw["vision_config"].update(VISION)
    return ModelConfig.from_dict(raw)


@contextmanager
def vision_server(tokenizer: Tokenizer) -> Iterator[str]:
    """-> the base URL of a live server on the tiny model (vision tower included), CPU engine."""
    from hinfer.server import create_app

    cfg = vision_config()
    torch.manual_seed(fixed_test_seed())
    model = random_init(Qwen35ForCausalLM(cfg, dtype=torch.float32, with_vision=True), seed=fixed_test_seed())
    ecfg = resolve_engine_config(
        cfg, EngineConfig(device="cpu", max_context=1024, max_concurrency=2, page_size=16)
    )
    engine = Engine(make_core(cfg, model, tokenizer, ecfg, torch.device("cpu")), MODEL)
    with live_server(create_app(engine, tokenizer, model_name=MODEL)) as u:
        yield u


def png(w: int = 80, h: int = 60) -> str:
    """A noise PNG, base64."""
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()
