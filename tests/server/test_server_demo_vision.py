"""`hinfer serve` with no model takes images: the built-in demo carries a small vision tower, so an image sent
through the OpenAI and the Anthropic dialect is answered and its tokens count in usage."""

from __future__ import annotations

import httpx
from server_proc import serve_process
from vision_server import png

from hinfer.model.image_preprocess import ImageSettings, image_grid


def test_demo_serve_answers_images_in_both_dialects(demo_cache) -> None:
    t, h, w = image_grid(48, 64, ImageSettings())
    image_tokens = t * h * w // 4  # 64 x 48 is resized up to the preprocessor's smallest area
    with serve_process(["--max-context", "2048", "--max-concurrency", "2"], demo_cache) as sp:
        url = sp.url
        chat = {"model": "demo", "max_tokens": 3, "temperature": 0}
        text = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                          json=chat | {"messages": [{"role": "user", "content": "Describe it."}]})  # fmt: skip
        parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + png(64, 48)}},
                 {"type": "text", "text": "Describe it."}]  # fmt: skip
        image = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                           json=chat | {"messages": [{"role": "user", "content": parts}]})  # fmt: skip
        assert text.status_code == image.status_code == 200, image.text
        assert image.json()["usage"]["prompt_tokens"] - text.json()["usage"]["prompt_tokens"] == image_tokens + 2
        msgs = {"model": "demo", "max_tokens": 3}
        a_text = httpx.post(f"{url}/v1/messages", timeout=120,
                            json=msgs | {"messages": [{"role": "user", "content": "Describe it."}]})  # fmt: skip
        blocks = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(64, 48)}},
                  {"type": "text", "text": "Describe it."}]  # fmt: skip
        a_image = httpx.post(f"{url}/v1/messages", timeout=120,
                             json=msgs | {"messages": [{"role": "user", "content": blocks}]})  # fmt: skip
        assert a_text.status_code == a_image.status_code == 200, a_image.text
        # input_tokens leaves out what came from the cache (the chat requests left their pages there)
        prompt = lambda r: r.json()["usage"]["input_tokens"] + r.json()["usage"]["cache_read_input_tokens"]  # noqa: E731
        assert prompt(a_image) - prompt(a_text) == image_tokens + 2
    assert "text only" not in sp.log  # the tower was loaded, not skipped
