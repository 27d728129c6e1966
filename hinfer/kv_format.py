"""KV-cache formats: what `--kv-dtype` names, how a page holds its tokens' K and V head rows, and their bytes.

A format (`KVFormat`) stores K and V each in a `CacheFormat`. A page of one layer's K (or V) is a tensor
[page_rows, n_kv, head_dim / pack] of the storage element type; its first `page_size` rows are the tokens'.
- bf16 / fp8 / fp32: the rounded values, nothing else.
- int8: round(x / s) in [-127, 127], one fp32 scale s = amax / 127 per token and head.
- int4 (k8v4's V; int4's K and V): two values per byte (element 2j in the low nibble, 2j + 1 in the high one,
  stored as q + 8 for q = round(x / s) in [-7, 7]), one fp32 scale s = amax / 7 per token, head and group of
  64 values. An int4 K cache holds the keys rotated (`rotated_keys`): the codes of H k, H the Walsh-Hadamard
  matrix of head_dim, and the cache write returns the queries as H q / head_dim, so q . k is unchanged while a
  few large channels are spread over all of them before the groups are cut (docs/quantization.md).
Scales live inside the page, in `scale_rows` extra rows after the token rows ([page_size, n_kv, groups] fp32,
row-major, padded to whole rows): a page is still one index of one tensor, so everything that moves pages
(prefix-cache host tier, copies) moves the scales with them, and the token rows keep their 16-byte alignment.
The cache tensor the ops see is the view of the token rows (`ModelState.k_cache`); its element type names its
storage format (int8 or uint8 say the scales are there, hinfer.ops.kv_cache).

Torch-free on purpose: `hinfer plan` counts these bytes without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hinfer.errors import ConfigError

SCALE_BYTES = 4  # fp32 scales
INT4_GROUP = 64  # values per int4 scale


@dataclass(frozen=True)
class CacheFormat:
    """How K or V is stored."""

    name: str
    torch_dtype: str  # attribute of torch holding the stored element type
    elem_bytes: int  # bytes per stored element
    pack: int = 1  # values per stored element (int4: 2)
    group: int | None = None  # values per scale; None: unscaled; 0: one scale per token and head

    @property
    def scaled(self) -> bool:
        return self.group is not None

    def groups(self, head_dim: int) -> int:
        """Scales per token and head."""
        if self.group is None:
            return 0
        if self.group and head_dim % self.group:
            raise ConfigError(f"{self.name} KV needs head_dim a multiple of {self.group}, not {head_dim}")
        return 1 if self.group == 0 else head_dim // self.group

    def row_elems(self, head_dim: int) -> int:
        return head_dim // self.pack

    def scale_rows(self, page_size: int, head_dim: int) -> int:
        """Rows of [n_kv, head_dim / pack] elements after the token rows holding the page's scales."""
        scale_bytes = page_size * self.groups(head_dim) * SCALE_BYTES
        return math.ceil(scale_bytes / (self.row_elems(head_dim) * self.elem_bytes))

    def page_rows(self, page_size: int, head_dim: int) -> int:
        return page_size + self.scale_rows(page_size, head_dim)

    def page_bytes(self, page_size: int, n_kv: int, head_dim: int) -> int:
        """One page of one layer, scales included: exactly what ModelState allocates."""
        return self.page_rows(page_size, head_dim) * n_kv * self.row_elems(head_dim) * self.elem_bytes

    def token_bytes(self, n_kv: int, head_dim: int) -> int:
        """What attention reads per token of one layer: the rows and their scales."""
        return n_kv * (self.row_elems(head_dim) * self.elem_bytes + self.groups(head_dim) * SCALE_BYTES)


BF16 = CacheFormat("bf16", "bfloat16", 2)
FP8 = CacheFormat("fp8", "float8_e4m3fn", 1)
INT8 = CacheFormat("int8", "int8", 1, group=0)
INT4 = CacheFormat("int4", "uint8", 1, pack=2, group=INT4_GROUP)
FP32 = CacheFormat("fp32", "float32", 4)
FP16 = CacheFormat("fp16", "float16", 2)
_BY_DTYPE = {f.torch_dtype: f for f in (BF16, FP8, INT8, INT4, FP32, FP16)}


@dataclass(frozen=True)
class KVFormat:
    name: str  # the --kv-dtype value
    k: CacheFormat
    v: CacheFormat

    @property
    def scaled(self) -> bool:
        return self.k.scaled or self.v.scaled

    def page_bytes(self, page_size: int, n_kv: int, head_dim: int) -> int:
        """One page of K and V of one layer."""
        return self.k.page_bytes(page_size, n_kv, head_dim) + self.v.page_bytes(page_size, n_kv, head_dim)

    def token_bytes(self, n_kv: int, head_dim: int) -> int:
        """K and V of one token of one layer, scales included."""
        return self.k.token_bytes(n_kv, head_dim) + self.v.token_bytes(n_kv, head_dim)

    def describe(self) -> str:
        parts = {"int8": "int8 + fp32 scale per token and head",
                 "int4": f"int4 + fp32 scale per {INT4_GROUP} values"}  # fmt: skip
        rot = ", keys Hadamard-rotated" if rotated_keys(self.k) else ""
        if self.k == self.v:
            return parts.get(self.k.name, self.k.name) + rot
        return f"K {parts.get(self.k.name, self.k.name)}, V {parts.get(self.v.name, self.v.name)}{rot}"


def rotated_keys(k: CacheFormat) -> bool:
    """Whether a K cache in this storage holds H k rather than k (int4: its groups would otherwise take the
    scale of the largest channel in them)."""
    return k.pack == 2


KV_FORMATS: dict[str, KVFormat] = {
    "bf16": KVFormat("bf16", BF16, BF16),
    "fp8": KVFormat("fp8", FP8, FP8),
    "int8": KVFormat("int8", INT8, INT8),
    "k8v4": KVFormat("k8v4", INT8, INT4),
    "int4": KVFormat("int4", INT4, INT4),
    "fp32": KVFormat("fp32", FP32, FP32),  # CPU reference runs
}
# what --kv-dtype offers (fp32 only arises on the CPU path)
CLI_KV_DTYPES = ("bf16", "fp8", "int8", "k8v4", "int4")


def kv_format_name(k: CacheFormat, v: CacheFormat) -> str:
    """The --kv-dtype name of K and V caches stored as k and v (storages no format pairs, fp16: k's name)."""
    return next((f.name for f in KV_FORMATS.values() if (f.k, f.v) == (k, v)), k.name)


def cache_format_of(torch_dtype_name: str) -> CacheFormat:
    """The storage format whose element type is `torch_dtype_name` (e.g. 'int8', or str(dtype))."""
    name = torch_dtype_name.removeprefix("torch.")
    if name not in _BY_DTYPE:
        raise ValueError(f"no KV cache format stores {torch_dtype_name}")
    return _BY_DTYPE[name]
