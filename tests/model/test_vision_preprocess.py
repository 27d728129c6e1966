"""Image preprocessing equals transformers' Qwen2-VL image processor (PIL backend, the released checkpoints'
settings): the same pixel values bit for bit and the same grids, for 20 generated images across aspect ratios,
and after a round trip through PNG, JPEG, WebP and GIF bytes."""

from __future__ import annotations

import io

import image_samples as S
import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from hinfer.errors import ImageError
from hinfer.model.image_decode import ImageLimits, decode_image
from hinfer.model.image_preprocess import ImageSettings, image_grid, preprocess_image, resized_size

pytest.importorskip("transformers")

RELEASED = ImageSettings()  # = the released preprocessor_config.json
SMALL = ImageSettings(
    min_pixels=32 * 32, max_pixels=96 * 96
)  # exercises the downscale branch on small images


def _hf_processor(s: ImageSettings):
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels},
        patch_size=s.patch_size, temporal_patch_size=s.temporal_patch_size, merge_size=s.merge_size,
        image_mean=list(s.image_mean), image_std=list(s.image_std),
    )  # fmt: skip


def _assert_same(img: Image.Image, s: ImageSettings, name: str) -> None:
    ref = _hf_processor(s)(images=[img], return_tensors="pt")
    pixels, grid = preprocess_image(img, s)
    assert [list(grid)] == ref["image_grid_thw"].tolist(), name
    assert pixels.dtype == torch.float32
    assert torch.equal(pixels, ref["pixel_values"]), (
        f"{name}: max diff {(pixels - ref['pixel_values']).abs().max()}"
    )
    assert grid == image_grid(img.height, img.width, s)


@pytest.mark.parametrize("settings", [RELEASED, SMALL], ids=["released", "small"])
def test_twenty_images_match_transformers(settings: ImageSettings) -> None:
    for name, img in S.twenty():
        _assert_same(img, settings, name)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_encoded_images_match_transformers(fmt: str) -> None:
    for name, img in S.twenty()[::4]:
        data = S.encode(img, fmt)
        ref_img = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        _assert_same(decode_image(data), SMALL, f"{fmt} {name}")
        assert np.array_equal(np.asarray(decode_image(data)), np.asarray(ref_img))


def test_gif_first_frame() -> None:
    frames = [Image.new("RGB", (40, 30), c) for c in [(255, 0, 0), (0, 0, 255)]]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    img = decode_image(buf.getvalue()).convert("RGB")
    assert img.getpixel((5, 5)) == (255, 0, 0)


def test_exif_orientation_applied() -> None:
    img = S.gradient(60, 20)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 on display
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif)
    assert decode_image(buf.getvalue()).size == (20, 60)


def test_resize_bounds() -> None:
    """Sides are multiples of 32 and the area lands within [min_pixels, max_pixels]."""
    for w, h in [(1, 1), (17, 4000), (4000, 3000), (10000, 9000), (256, 256), (257, 255)]:
        rh, rw = resized_size(h, w, RELEASED)
        assert rh % 32 == 0 and rw % 32 == 0
        assert RELEASED.min_pixels <= rh * rw <= RELEASED.max_pixels, (w, h, rw, rh)


@pytest.mark.parametrize(
    "data, limits, message",
    [
        (b"", ImageLimits(), "empty"),
        (b"not an image at all", ImageLimits(), "not recognised"),
        (S.encode(S.gradient(8, 8), "BMP"), ImageLimits(), "not recognised"),
        (S.encode(S.gradient(64, 64), "PNG"), ImageLimits(max_bytes=100), "bytes; the limit"),
        (S.encode(S.gradient(64, 64), "PNG"), ImageLimits(max_pixels=4000), "pixels; the limit"),
        (S.encode(S.gradient(300, 1), "PNG"), ImageLimits(), "aspect ratio"),
        (S.encode(S.noise(64, 64, 0), "PNG")[:200], ImageLimits(), "could not be"),
        (S.encode(S.noise(64, 64, 0), "JPEG")[:12], ImageLimits(), "could not be|not recognised"),
    ],
    ids=["empty", "garbage", "bmp", "bytes", "pixels", "aspect", "truncated png", "truncated jpeg"],
)
def test_bad_images_are_refused(data: bytes, limits: ImageLimits, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        decode_image(data, limits)


def test_settings_from_preprocessor_config() -> None:
    from hinfer.config import load_model_config
    from hinfer.fixtures import config_dir

    path = config_dir("qwen3.6-35b-a3b")
    assert path is not None
    import json

    raw = json.loads((path / "preprocessor_config.json").read_text())
    vision = load_model_config(path).vision
    assert vision is not None
    assert ImageSettings.from_config(vision, raw) == RELEASED == ImageSettings.from_config(vision)
