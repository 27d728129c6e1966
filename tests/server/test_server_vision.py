"""Images through the HTTP API on a tiny random multimodal model with the real tokenizer: OpenAI image_url
data URLs and Anthropic base64 image blocks are answered, their tokens count in usage and count_tokens, and
requests the server will not serve get the dialect's 400."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest
from server_live import MODEL as SCRIPTED_MODEL
from vision_server import IMAGE_TOKENS, MODEL, vision_server
from vision_server import png as _png

from hinfer.model.image_preprocess import ImageSettings, image_grid


@pytest.fixture(scope="module")
def url(tokenizer) -> Iterator[str]:
    with vision_server(tokenizer) as u:
        yield u


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


def _tool_turn(result_content, own_image: bool = False) -> dict:
    """A Claude Code shaped turn: a tool call, then its result (`result_content`) and, with `own_image`, the
    user's own image after it."""
    user = [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result_content}]
    if own_image:
        user += [{"type": "text", "text": "and mine"},
                 {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png()}}]
    return {"model": MODEL, "max_tokens": 3, "messages": [
        {"role": "user", "content": "Read shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
        {"role": "user", "content": user}], "tools": [{"name": "read", "input_schema": {"type": "object"}}]}  # fmt: skip


def test_anthropic_tool_result_images_reach_a_vision_model(url: str) -> None:
    """Claude Code's Read of an image answers with an image block in the tool result: a model with a vision tower
    sees it (its tokens counted alike in usage and count_tokens), where a text-only model gets a placeholder."""
    shot = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(300, 90)}}
    body = _tool_turn([{"type": "text", "text": "shot.png"}, shot], own_image=True)
    r = httpx.post(f"{url}/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    n = httpx.post(f"{url}/v1/messages/count_tokens", json={k: body[k] for k in ("model", "messages", "tools")})
    assert n.json()["input_tokens"] == r.json()["usage"]["input_tokens"]
    text_only = _tool_turn([{"type": "text", "text": "shot.png"}], own_image=True)
    m = httpx.post(f"{url}/v1/messages/count_tokens", json={k: text_only[k] for k in ("model", "messages", "tools")})
    t, h, w = image_grid(90, 300, ImageSettings())
    assert n.json()["input_tokens"] - m.json()["input_tokens"] == t * h * w // 4 + 2


def test_anthropic_tool_result_images_follow_render_order() -> None:
    """Images are decoded in the order the template renders them: a message's tool results before its own
    images, so each image pad gets its own picture."""
    from hinfer.server.anthropic_convert import convert_messages
    from hinfer.server.schemas_anthropic import MessagesRequest

    shot = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _png(300, 90)}}
    body = MessagesRequest.model_validate(_tool_turn([shot], own_image=True))
    images: list = []
    msgs = convert_messages(body, images, tool_images=True)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[2]["content"] == [{"type": "image"}] and msgs[3]["content"][-1] == {"type": "image"}
    assert [i.size for i in images] == [(300, 90), (80, 60)]
    images = []
    msgs = convert_messages(body, images)  # a text-only model: a placeholder in the tool result
    assert msgs[2]["content"].startswith("[image omitted") and [i.size for i in images] == [(80, 60)]
