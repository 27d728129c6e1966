"""Images through the OpenAI Responses API with the official `openai` SDK, on the tiny random multimodal model:
`input_image` parts with data URLs are answered (plain, streamed, and carried into a turn that continues by
previous_response_id), their tokens count in usage, and what the server will not take is a 400 in the OpenAI
error shape naming the part."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from server_live import MODEL as SCRIPTED_MODEL
from vision_server import MODEL, png, vision_server

from hinfer.model.image_preprocess import ImageSettings, image_grid

QUESTION = {"type": "input_text", "text": "What is in the picture?"}


@pytest.fixture(scope="module")
def client(tokenizer) -> Iterator[openai.OpenAI]:
    with vision_server(tokenizer) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="dummy", max_retries=0, timeout=60)


def image(w: int = 80, h: int = 60) -> dict:
    return {"type": "input_image", "image_url": "data:image/png;base64," + png(w, h), "detail": "auto"}


def user(*parts: dict) -> list[dict]:
    return [{"role": "user", "content": list(parts)}]


def image_tokens(w: int, h: int) -> int:
    t, gh, gw = image_grid(h, w, ImageSettings())
    return t * gh * gw // 4


def test_input_image_counts_its_tokens(client: openai.OpenAI) -> None:
    text = client.responses.create(model=MODEL, input=user(QUESTION), max_output_tokens=3, temperature=0)
    with_image = client.responses.create(model=MODEL, input=user(image(), QUESTION), max_output_tokens=3,
                                         temperature=0)  # fmt: skip
    assert text.status == with_image.status == "incomplete"  # max_output_tokens reached: the model ran
    extra = with_image.usage.input_tokens - text.usage.input_tokens
    assert extra == image_tokens(80, 60) + 2  # 80 x 60 is resized up to 320 x 224: 70 tokens, + vision start / end
    assert with_image.usage.output_tokens == 3


def test_streamed_and_continued(client: openai.OpenAI) -> None:
    with client.responses.create(model=MODEL, input=user(QUESTION, image(300, 90)), max_output_tokens=2,
                                 stream=True) as stream:  # fmt: skip
        events = list(stream)
    done = events[-1].response
    assert events[0].type == "response.created" and done.usage.input_tokens > image_tokens(300, 90)
    first = client.responses.create(model=MODEL, input=user(image(), QUESTION), max_output_tokens=2, store=True)
    second = client.responses.create(model=MODEL, input="And the colours?", previous_response_id=first.id,
                                     max_output_tokens=2)  # fmt: skip
    assert second.usage.input_tokens > first.usage.input_tokens > image_tokens(80, 60)  # the stored turn's image
    assert second.usage.input_tokens_details.cached_tokens >= 64  # its pages from the cache, named by its content


@pytest.mark.parametrize("content, param, needle", [
    ([{"type": "input_image", "image_url": "https://example.com/a.png"}], "input.0.content.0.image_url",
     "not fetched"),
    ([{"type": "input_image", "file_id": "file-123"}], "input.0.content.0.file_id", "file_id is not supported"),
    ([{"type": "input_image", "image_url": "data:image/bmp;base64,Qk0="}], "input.0.content.0.image_url",
     "media type"),
    ([{"type": "input_image"}], "input.0.content.0.image_url", "image_url must be a string"),
    ([{"type": "input_image", "image_url": "data:image/png;base64," + png(400, 1)}], "input.0.content.0.image_url",
     "aspect ratio"),
    ([{"type": "input_file", "file_data": "x"}], "input.0.content.0", "not supported"),
])  # fmt: skip
def test_bad_images_are_400(client: openai.OpenAI, content: list, param: str, needle: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=[{"role": "user", "content": content}], max_output_tokens=2)
    err = e.value.body
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error", err
    assert err["param"] == param and needle in err["message"], err


def test_images_only_in_user_messages(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=[{"role": "developer", "content": [image()]},
                                                    {"role": "user", "content": "hi"}], max_output_tokens=2)
    assert e.value.body["param"] == "input.0.content.0" and "user messages only" in e.value.body["message"]


def test_text_only_model_refuses_input_image(base_url: str) -> None:
    """The scripted engine has no vision tower: a good image is a 400 naming the input."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=SCRIPTED_MODEL, input=user(image(), QUESTION))
    assert e.value.body["param"] == "input" and "takes no images" in e.value.body["message"]
