"""Image bytes -> a Pillow image: PNG, JPEG, WebP, or a GIF's first frame, within size limits.

Limits are checked on the header, before the pixels are decoded, so an oversize or bomb-like file costs
nothing. Every failure is an ImageError whose message says what was wrong (the server answers it with 400).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from hinfer.errors import ImageError

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = 20 * 1024 * 1024  # encoded size
    max_pixels: int = 64 * 1024 * 1024  # decoded width x height, before resizing
    max_aspect: float = 200.0  # the preprocessor's own bound (longer side / shorter side)


def decode_image(data: bytes, limits: ImageLimits = ImageLimits()) -> Image.Image:
    """The image of `data`, EXIF orientation applied (as transformers' load_image does), alpha kept."""
    if len(data) > limits.max_bytes:
        raise ImageError(f"image is {len(data):,} bytes; the limit is {limits.max_bytes:,}")
    if not data:
        raise ImageError("image is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        raise ImageError("image format not recognised; supported: PNG, JPEG, WebP, GIF") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError(f"image is larger than {limits.max_pixels:,} pixels") from None
    except Exception as e:  # a truncated or corrupt header
        raise ImageError(f"image could not be read: {e}") from None
    w, h = img.size
    if w < 1 or h < 1:
        raise ImageError(f"image has no pixels ({w}x{h})")
    if w * h > limits.max_pixels:
        raise ImageError(f"image is {w}x{h} = {w * h:,} pixels; the limit is {limits.max_pixels:,}")
    if max(w, h) / min(w, h) > limits.max_aspect:
        raise ImageError(f"image is {w}x{h}; its aspect ratio must be at most {limits.max_aspect:g}:1")
    try:
        img.seek(0)  # a GIF's (or animated WebP's) first frame
        img.load()
        return ImageOps.exif_transpose(img)
    except Exception as e:  # truncated or corrupt pixel data
        raise ImageError(f"image could not be decoded ({img.format}): {e}") from None
