"""Images in requests: OpenAI `image_url` / Responses `input_image` data URLs and Anthropic base64 `image` blocks
-> decoded images, the template's one image pad per image expanded to the image's tokens, and the engine's
ImageInputs.

http(s) URLs are refused (the server may have no network, and fetching client-chosen URLs is a risk);
every bad image is a 400 naming the content part.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

from PIL import Image

from hinfer.errors import ImageError
from hinfer.model.image_decode import decode_image
from hinfer.model.image_preprocess import ImageSettings, preprocess_image
from hinfer.model.image_prompt import ImageInput, expand_image_pads
from hinfer.server.errors import bad_request
from hinfer.vision_config import VisionConfig

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
PAD = "<|image_pad|>"


def image_from_url(url: Any, param: str, field: str = "image_url.url") -> Image.Image:
    """An OpenAI image URL (chat's image_url.url, the Responses API's image_url): only `data:image/...;base64,...`
    URLs."""
    if not isinstance(url, str):
        raise bad_request(f"{field} must be a string", param=param)
    if url.startswith(("http://", "https://")):
        raise bad_request("image URLs are not fetched (this server may have no network); send the image inline "
                          "as a data URL: data:image/png;base64,...", param=param)  # fmt: skip
    head, sep, data = url.partition(",")
    if not (url.startswith("data:") and sep and head.endswith(";base64")):
        raise bad_request(f"{field} must be a base64 data URL (data:image/png;base64,...)", param=param)
    return image_from_base64(data, head[len("data:") : -len(";base64")], param)


def image_from_base64(data: Any, media_type: Any, param: str) -> Image.Image:
    if media_type not in MEDIA_TYPES:
        raise bad_request(f"image media type {media_type!r} is not supported; use one of {', '.join(MEDIA_TYPES)}",
                          param=param)  # fmt: skip
    if not isinstance(data, str):
        raise bad_request("image data must be a base64 string", param=param)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("image data is not valid base64", param=param) from None
    try:
        return decode_image(raw)
    except ImageError as e:
        raise bad_request(str(e), param=param) from None


def image_inputs(
    ids: list[int],
    images: list[Image.Image],
    vision: VisionConfig | None,
    pad_id: int | None,
    settings: ImageSettings | None = None,
    param: str = "messages",
) -> tuple[list[int], list[ImageInput]]:
    """Preprocess the images and give each of the prompt's image pads (one per image, in order) the image's
    token count. -> (prompt ids, engine inputs). Runs in a worker thread (resizing large images takes time).
    `param`: the request field that holds the messages, named by errors."""
    if not images:
        return ids, []
    if vision is None or pad_id is None:
        raise bad_request("this model takes no images (no vision tower loaded)", param=param)
    s = settings or ImageSettings.from_config(vision)
    inputs = [ImageInput(*preprocess_image(img, s)) for img in images]
    try:
        ids = expand_image_pads(ids, pad_id, [i.grid for i in inputs], vision.spatial_merge_size)
    except ValueError as e:
        raise bad_request(str(e), param=param) from None
    return ids, inputs


def reads_images(st: Any) -> bool:
    """Whether the served model takes images (a vision tower loaded)."""
    return getattr(st.engine, "vision", None) is not None


async def with_images(st: Any, prompt: Any, ids: list[int], param: str = "messages"
                      ) -> tuple[list[int], list[ImageInput]]:  # fmt: skip
    """The rendered prompt's image pads expanded and its images preprocessed, off the event loop."""
    if not prompt.images:
        return ids, []
    vision = getattr(st.engine, "vision", None)
    return await asyncio.to_thread(image_inputs, ids, prompt.images, vision, st.tokenizer.token_to_id(PAD), None,
                                   param)  # fmt: skip
