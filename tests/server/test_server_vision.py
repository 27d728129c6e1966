"""Images through the HTTP API on a tiny random multimodal model with the real tokenizer: OpenAI image_url
data URLs and Anthropic base64 image blocks are answered, their tokens count in usage and count_tokens, and
requests the server will not serve get the dialect's 400."""

from __future__ import annotations

import base64
import copy
import io
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch
from PIL import Image
from server_live import MODEL as SCRIPTED_MODEL
from server_live import live_server

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.engine import Engine
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import config_dir, fixed_test_seed
from hinfer.model.image_preprocess import ImageSettings, image_grid
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init

MODEL = "tiny-vision"
TEXT = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "intermediate_size": 96, "mtp_num_hidden_layers": 0}  # fmt: skip
# real patch size and merge, so images take as many tokens as on the released models (at least 64)
VISION = {"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 48, "out_hidden_size": 64,
          "num_position_embeddings": 64}  # fmt: skip
IMAGE_TOKENS = 64


def _config() -> ModelConfig:
    path = config_dir("qwen3.5-0.8b")
    assert path is not None
    raw = copy.deepcopy(json.loads((path / "config.json").read_text()))
    raw["text_config"].update(TEXT)
    raw["text_config"].pop("layer_types", None)
    raw["vision_config"].update(VISION)
    return ModelConfig.from_dict(raw)


@pytest.fixture(scope="module")
def url(tokenizer) -> Iterator[str]:
    from hinfer.server import create_app

    cfg = _config()
    torch.manual_seed(fixed_test_seed())
    model = random_init(Qwen35ForCausalLM(cfg, dtype=torch.float32, with_vision=True), seed=fixed_test_seed())
    ecfg = resolve_engine_config(
        cfg, EngineConfig(device="cpu", max_context=1024, max_concurrency=2, page_size=16)
    )
    engine = Engine(make_core(cfg, model, tokenizer, ecfg, torch.device("cpu")), MODEL)
    with live_server(create_app(engine, tokenizer, model_name=MODEL)) as u:
        yield u


def _png(w: int = 80, h: int = 60) -> str:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _chat(content) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 3,
        "temperature": 0,
        "messages": [{"role": "user", "content": content}],
    }


def _msgs(content) -> dict:
    return {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": content}]}


def test_openai_image_url_counts_image_tokens(url: str) -> None:
    text_only = httpx.post(f"{url}/v1/chat/completions", json=_chat("What is in the picture?"), timeout=60)
    with_image = httpx.post(f"{url}/v1/chat/completions", timeout=60, json=_chat([
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png()}},
        {"type": "text", "text": "What is in the picture?"}]))  # fmt: skip
    assert text_only.status_code == with_image.status_code == 200, with_image.text
    extra = with_image.json()["usage"]["prompt_tokens"] - text_only.json()["usage"]["prompt_tokens"]
    t, h, w = image_grid(60, 80, ImageSettings())  # 80 x 60 is resized up to 320 x 224: 70 tokens
    assert extra == t * h * w // 4 + 2  # the image's tokens between vision start and end
    assert with_image.json()["usage"]["completion_tokens"] == 3


def test_anthropic_image_block_and_count_tokens(url: str) -> None:
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(300, 90)}},
               {"type": "text", "text": "Describe it."}]  # fmt: skip
    r = httpx.post(f"{url}/v1/messages", json=_msgs(content), timeout=60)
    assert r.status_code == 200, r.text
    n = httpx.post(
        f"{url}/v1/messages/count_tokens", json={"model": MODEL, "messages": _msgs(content)["messages"]}
    )
    assert n.json()["input_tokens"] == r.json()["usage"]["input_tokens"]
    text = httpx.post(f"{url}/v1/messages/count_tokens", json={"model": MODEL, "messages": _msgs("Describe it.")
                                                               ["messages"]}).json()["input_tokens"]  # fmt: skip
    assert n.json()["input_tokens"] - text > IMAGE_TOKENS  # 300 x 90 keeps its aspect: more than the minimum


@pytest.mark.parametrize("content, needle", [
    ([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}], "not fetched"),
    ([{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}], "media type"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"junk").decode()}}],
     "not recognised"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png(400, 1)}}], "aspect ratio"),
])  # fmt: skip
def test_openai_bad_images_are_400(url: str, content, needle: str) -> None:
    r = httpx.post(f"{url}/v1/chat/completions", json=_chat(content), timeout=60)
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"].startswith("messages.0.content.0")


def test_text_only_model_refuses_images(base_url: str) -> None:
    """The scripted engine has no vision tower: a good image is still a clear 400, in both dialects."""
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=60,
        json=_chat([{"type": "image_url", "image_url": {"url": "data:image/png;base64," + _png()}}])
        | {"model": SCRIPTED_MODEL},
    )
    assert r.status_code == 400 and "takes no images" in r.json()["error"]["message"], r.text
    a = httpx.post(f"{base_url}/v1/messages", timeout=60, json=_msgs(
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png()}}])
        | {"model": SCRIPTED_MODEL})  # fmt: skip
    assert (
        a.status_code == 400
        and a.json()["type"] == "error"
        and "takes no images" in a.json()["error"]["message"]
    )
