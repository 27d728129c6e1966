"""KV-cache formats: what `--kv-dtype` names, how a page holds its tokens' K (or V) head rows, and their bytes.

A page of one layer is a tensor [page_rows, n_kv, head_dim] of the format's element type; its first
`page_size` rows are the tokens'. bf16 / fp8 / fp32 store the rounded values and nothing else. int8 stores
round(x / s) with one fp32 scale s = amax / 127 per token and head, and keeps those scales inside the page, in
`scale_rows` extra rows after the token rows ([page_size, n_kv] fp32, row-major, padded to whole rows): a page
is still one index of one tensor, so everything that moves pages (prefix-cache host tier, copies) moves the
scales with them, and the token rows keep their 16-byte alignment. The cache tensor the ops see is the view of
the token rows (`ModelState.k_cache`); the element type int8 says the scales are there (hinfer.ops.kv_cache).

Torch-free on purpose: `hinfer plan` counts these bytes without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCALE_BYTES = 4  # fp32 scale per token and head (scaled formats)


@dataclass(frozen=True)
class KVFormat:
    name: str  # the --kv-dtype value
    torch_dtype: str  # attribute of torch holding the stored element type
    elem_bytes: int
    scaled: bool = False  # int8: a scale per token and head after the page's token rows

    def scale_rows(self, page_size: int, head_dim: int) -> int:
        """Rows of [n_kv, head_dim] elements after the token rows holding the page's scales."""
        if not self.scaled:
            return 0
        return math.ceil(page_size * SCALE_BYTES / (head_dim * self.elem_bytes))

    def page_rows(self, page_size: int, head_dim: int) -> int:
        return page_size + self.scale_rows(page_size, head_dim)

    def page_bytes(self, page_size: int, n_kv: int, head_dim: int) -> int:
        """One page of K (or V) of one layer, scales included: exactly what ModelState allocates."""
        return self.page_rows(page_size, head_dim) * n_kv * head_dim * self.elem_bytes

    def token_bytes(self, n_kv: int, head_dim: int) -> int:
        """What attention reads per token of K (or V) of one layer: the rows and their scales."""
        return n_kv * (head_dim * self.elem_bytes + (SCALE_BYTES if self.scaled else 0))


KV_FORMATS: dict[str, KVFormat] = {
    "bf16": KVFormat("bf16", "bfloat16", 2),
    "fp8": KVFormat("fp8", "float8_e4m3fn", 1),
    "int8": KVFormat("int8", "int8", 1, scaled=True),
    "fp32": KVFormat("fp32", "float32", 4),  # CPU reference runs
}
CLI_KV_DTYPES = ("bf16", "fp8", "int8")  # what --kv-dtype offers (fp32 only arises on the CPU path)


def kv_format_of(torch_dtype_name: str) -> KVFormat:
    """The format whose stored element type is `torch_dtype_name` (e.g. 'int8', from str(dtype))."""
    name = torch_dtype_name.removeprefix("torch.")
    for f in KV_FORMATS.values():
        if f.torch_dtype == name:
            return f
    if name == "float16":
        return KVFormat("fp16", "float16", 2)
    raise ValueError(f"no KV format stores {torch_dtype_name}")
