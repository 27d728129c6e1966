"""Images made in the tests: gradients, text, photo-like noise, flat colours, alpha, palettes, many shapes."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

# (width, height): square, wide, tall, tiny (upscaled), odd sizes, strong aspect ratios
SIZES = [(64, 64), (200, 120), (90, 300), (17, 23), (333, 257), (512, 48), (40, 400), (1, 1), (128, 127),
         (301, 301)]  # fmt: skip


def gradient(w: int, h: int) -> Image.Image:
    y, x = np.mgrid[0:h, 0:w]
    r = (255 * x / max(w - 1, 1)).astype(np.uint8)
    g = (255 * y / max(h - 1, 1)).astype(np.uint8)
    b = ((x + y) * 7 % 256).astype(np.uint8)
    return Image.fromarray(np.stack([r, g, b], -1), "RGB")


def text(w: int, h: int) -> Image.Image:
    img = Image.new("RGB", (w, h), (250, 250, 245))
    d = ImageDraw.Draw(img)
    for i, y in enumerate(range(0, h, 12)):
        d.text((2, y), f"line {i}: the quick brown fox {i * 37}", fill=(20, 20, 20))
    return img


def noise(w: int, h: int, seed: int) -> Image.Image:
    """Photo-like: smooth colour fields plus grain."""
    rng = np.random.default_rng(seed)
    base = Image.fromarray(rng.integers(0, 256, (max(h // 8, 1), max(w // 8, 1), 3), dtype=np.uint8))
    base = base.resize((w, h), Image.Resampling.BILINEAR).filter(ImageFilter.GaussianBlur(2))
    grain = rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(np.asarray(base, dtype=np.float64) + grain, 0, 255).astype(np.uint8))


def with_alpha(img: Image.Image, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (img.height, img.width), dtype=np.uint8)
    out = img.convert("RGBA")
    out.putalpha(Image.fromarray(a, "L"))
    return out


def twenty() -> list[tuple[str, Image.Image]]:
    """20 named images across SIZES: gradients, text, noise; some grey, palette or with alpha."""
    out: list[tuple[str, Image.Image]] = []
    for i, (w, h) in enumerate(SIZES):
        out.append(
            (f"gradient {w}x{h}" if i % 2 else f"text {w}x{h}", gradient(w, h) if i % 2 else text(w, h))
        )
        out.append((f"noise {w}x{h}", noise(w, h, seed=i)))
    out[2] = ("grey " + out[2][0], out[2][1].convert("L"))
    out[5] = ("alpha " + out[5][0], with_alpha(out[5][1], seed=5))
    out[8] = ("palette " + out[8][0], out[8][1].convert("P", palette=Image.Palette.ADAPTIVE))
    return out


def encode(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "JPEG":
        img = img.convert("RGB")
    img.save(buf, format=fmt)
    return buf.getvalue()
