"""A Pillow image -> the vision tower's input rows, as transformers' Qwen2-VL image processor (PIL backend)
makes them for the Qwen3.5/3.6 checkpoints:

    RGB (alpha composited onto white) -> bicubic resize to (H, W), multiples of patch x merge, with
    min_pixels <= H x W <= max_pixels and the aspect ratio nearly kept -> x / 255, (x - mean) / std ->
    patches of (channel, frame, row, col), the frame repeated temporal_patch_size times, in merge-block order.

Bit-for-bit equal to that processor (same float32/float64 steps); its torchvision backend resizes in torch and
differs by resize rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from hinfer.model.vision_grid import Grid
from hinfer.vision_config import DEFAULT_MAX_PIXELS, VisionConfig


@dataclass(frozen=True)
class ImageSettings:
    """The preprocessor's settings; defaults are the released checkpoints' preprocessor_config.json."""

    min_pixels: int = 65536  # "shortest_edge": 256 x 256
    max_pixels: int = DEFAULT_MAX_PIXELS  # "longest_edge": 4096 x 4096
    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @property
    def factor(self) -> int:
        """Side lengths are multiples of this: one merged token covers factor x factor pixels."""
        return self.patch_size * self.merge_size

    @classmethod
    def from_config(cls, vision: VisionConfig, preprocessor: dict[str, Any] | None = None) -> ImageSettings:
        """From the vision tower's shape and, when the checkpoint has one, its preprocessor_config.json."""
        p = preprocessor or {}
        size = p.get("size") or {}
        return cls(
            min_pixels=int(size.get("shortest_edge", p.get("min_pixels", cls.min_pixels))),
            max_pixels=int(size.get("longest_edge", p.get("max_pixels", cls.max_pixels))),
            patch_size=vision.patch_size,
            temporal_patch_size=vision.temporal_patch_size,
            merge_size=vision.spatial_merge_size,
            image_mean=_rgb(p.get("image_mean", cls.image_mean)),
            image_std=_rgb(p.get("image_std", cls.image_std)),
        )


def _rgb(x: Any) -> tuple[float, float, float]:
    r, g, b = (float(v) for v in x)
    return r, g, b


def resized_size(height: int, width: int, s: ImageSettings) -> tuple[int, int]:
    """(H, W) the image is resized to: transformers' smart_resize."""
    f = s.factor
    h, w = round(height / f) * f, round(width / f) * f
    if h * w > s.max_pixels:
        beta = math.sqrt(height * width / s.max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < s.min_pixels:
        beta = math.sqrt(s.min_pixels / (height * width))
        h = math.ceil(height * beta / f) * f
        w = math.ceil(width * beta / f) * f
    return h, w


def image_grid(height: int, width: int, s: ImageSettings) -> Grid:
    """The (t, h, w) patch grid of an image of this size: what the prompt's placeholder count follows."""
    h, w = resized_size(height, width, s)
    return 1, h // s.patch_size, w // s.patch_size


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return img.convert("RGB")


def preprocess_image(img: Image.Image, s: ImageSettings) -> tuple[torch.Tensor, Grid]:
    """-> (pixel rows [h*w, 3 * temporal * patch^2] float32, grid (1, h, w))."""
    rgb = to_rgb(img)
    height, width = rgb.height, rgb.width
    rh, rw = resized_size(height, width, s)
    rgb = rgb.resize((rw, rh), resample=Image.Resampling.BICUBIC)
    x = (np.asarray(rgb).astype(np.float64) * (1 / 255)).astype(np.float32)  # [H, W, C]
    x = (x - np.array(s.image_mean, dtype=np.float32)) / np.array(s.image_std, dtype=np.float32)
    return patchify(x.transpose(2, 0, 1), s)


def patchify(x: np.ndarray, s: ImageSettings) -> tuple[torch.Tensor, Grid]:
    """[C, H, W] -> rows in merge-block order, each (channel, frame, row, col) with the frame repeated."""
    c, height, width = x.shape
    p, m, t = s.patch_size, s.merge_size, s.temporal_patch_size
    gh, gw = height // p, width // p
    x = x.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)  # (bh, bw, mh, mw, c, p, p)
    x = np.broadcast_to(x[:, :, :, :, :, None], (*x.shape[:5], t, p, p))
    return torch.from_numpy(np.ascontiguousarray(x).reshape(gh * gw, c * t * p * p)), (1, gh, gw)
