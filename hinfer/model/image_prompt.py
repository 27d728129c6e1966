"""A prompt's images placed in it: the (t, h, w) rotary positions of every token, and which tokens take which
image embedding. What each prefill chunk of the prompt needs is a slice of this (`chunk_fields`).

Positions follow transformers' get_rope_index for Qwen3.5: text tokens count up on all three axes; an image's
tokens (its llm_h x llm_w merged patches, row-major) sit at t = start, h = start + row, w = start + col, and the
text after it resumes at start + max(llm_h, llm_w). Tokens past the prompt are at index + rope_delta.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field

import torch

from hinfer.model.vision_grid import Grid, merged_tokens


@dataclass
class ImageInput:
    """One preprocessed image: its patch rows and grid (model/image_preprocess.py)."""

    pixels: torch.Tensor  # [t*h*w, patch_dim] float32
    grid: Grid

    def digest(self) -> int:
        """A 62-bit name of the image's content, for naming prefix-cache pages that hold its tokens."""
        h = hashlib.blake2b(
            str(self.grid).encode() + self.pixels.contiguous().numpy().tobytes(), digest_size=8
        )
        return int.from_bytes(h.digest(), "little") >> 2


def hash_ids(token_ids: list[int], rows: list[int], images: list[ImageInput], merge: int) -> list[int]:
    """The prompt as the prefix cache names it: each image's placeholder tokens replaced by negative ids made
    from its content (real ids are >= 0), so two prompts share pages only where their images are equal."""
    out = list(token_ids)
    k = 0
    for img in images:
        d = img.digest()
        for j in range(merged_tokens(img.grid, merge)):
            out[rows[k]] = -((d + j) % 2**62) - 1
            k += 1
    return out


@dataclass
class PromptImages:
    positions: list[list[int]]  # [3][L]: (t, h, w) position of every prompt token
    rope_delta: int  # a token at index i >= L (generated) is at position i + rope_delta
    rows: list[int]  # prompt indices of the image placeholder tokens, in order
    counts: list[int]  # placeholder tokens of each image, in order
    embeds: torch.Tensor | None = None  # [len(rows), H], the images' encoder output (rows of encoded images)
    encoded: set[int] = field(default_factory=set)  # images whose rows of `embeds` are filled

    def images_in(self, start: int, end: int) -> list[int]:
        """The images with a placeholder among prompt tokens [start, end)."""
        lo, hi = bisect.bisect_left(self.rows, start), bisect.bisect_left(self.rows, end)
        out, first = [], 0
        for i, n in enumerate(self.counts):
            if first < hi and first + n > lo:
                out.append(i)
            first += n
        return out

    def set_image(self, i: int, embeds: torch.Tensor) -> None:
        """Image i's encoder output [counts[i], H] into its rows."""
        if self.embeds is None:
            self.embeds = embeds.new_zeros(len(self.rows), embeds.shape[-1])
        first = sum(self.counts[:i])
        self.embeds[first : first + self.counts[i]] = embeds
        self.encoded.add(i)

    def chunk_fields(self, start: int, end: int) -> dict:
        """SeqChunk fields for prompt tokens [start, end): positions, placeholder rows, their embeddings."""
        lo = bisect.bisect_left(self.rows, start)
        hi = bisect.bisect_left(self.rows, end)
        if hi == lo:  # text only: one run counting up on all axes, so a plain offset says it
            return {"rope_delta": self.positions[0][start] - start if end > start else self.rope_delta}
        assert self.embeds is not None, "the images must be encoded before their tokens are prefilled"
        fields: dict = {"rope_delta": self.rope_delta}
        fields["axis_positions"] = [a[start:end] for a in self.positions]
        fields["image_rows"] = [r - start for r in self.rows[lo:hi]]
        fields["image_embeds"] = self.embeds[lo:hi]
        return fields

    def position_fields(self, start: int, end: int) -> dict:
        """SeqChunk position fields of rows [start, end) (prompt or not) without the images' embeddings: for a
        model that reads other inputs at those rows (the MTP head: the next token's embedding) but must place them
        where the target placed its own."""
        n = len(self.positions[0])
        if start >= n:
            return {"rope_delta": self.rope_delta}
        lo, hi = bisect.bisect_left(self.rows, start), bisect.bisect_left(self.rows, min(end, n))
        if hi == lo and end <= n:
            return {"rope_delta": self.positions[0][start] - start}
        gen = [i + self.rope_delta for i in range(n, end)]
        return {"rope_delta": self.rope_delta, "axis_positions": [a[start:end] + gen for a in self.positions]}


def place_images(token_ids: list[int], image_token_id: int, grids: list[Grid], merge: int) -> PromptImages:
    """Positions for a prompt whose image placeholders (runs of image_token_id, one run of
    merged_tokens(grid) per image, in order) stand for the images of `grids`."""
    rows = [i for i, t in enumerate(token_ids) if t == image_token_id]
    want = sum(merged_tokens(g, merge) for g in grids)
    if len(rows) != want:
        raise ValueError(
            f"prompt has {len(rows)} image placeholder tokens; its {len(grids)} images need {want}"
        )
    t_pos: list[int] = []
    h_pos: list[int] = []
    w_pos: list[int] = []
    i, cur, image = 0, 0, 0
    while i < len(token_ids):
        if token_ids[i] != image_token_id:
            t_pos.append(cur)
            h_pos.append(cur)
            w_pos.append(cur)
            i, cur = i + 1, cur + 1
            continue
        n = merged_tokens(grids[image], merge)
        if any(x != image_token_id for x in token_ids[i : i + n]):
            raise ValueError(f"image {image}'s {n} placeholder tokens are not one run")
        t, h, w = grids[image]
        lh, lw = h // merge, w // merge
        for f in range(t):  # frames (images have one)
            for r in range(lh):
                for c in range(lw):
                    t_pos.append(cur + f)
                    h_pos.append(cur + r)
                    w_pos.append(cur + c)
        i += n
        cur += max(lh, lw)
        image += 1
    delta = (max(max(t_pos), max(h_pos), max(w_pos)) + 1 - len(token_ids)) if token_ids else 0
    return PromptImages([t_pos, h_pos, w_pos], delta, rows, [merged_tokens(g, merge) for g in grids])


def expand_image_pads(ids: list[int], pad_id: int, grids: list[Grid], merge: int) -> list[int]:
    """A rendered prompt with one image pad per image (the chat template's) -> one pad per image token."""
    pads = [i for i, t in enumerate(ids) if t == pad_id]
    if len(pads) != len(grids):
        raise ValueError(f"the prompt has {len(pads)} image places for {len(grids)} images")
    out: list[int] = []
    prev = 0
    for at, grid in zip(pads, grids):
        out += ids[prev:at] + [pad_id] * merged_tokens(grid, merge)
        prev = at + 1
    return out + ids[prev:]
