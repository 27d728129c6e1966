"""Reading and writing the paged KV cache in its format (hinfer.kv_format): the torch bodies.

The ops take a layer's cache as the view of its token rows, [P, page_size, n_kv, head_dim]; its element type
names the format. An int8 view has fp32 scales right after each page's token rows (same storage), which
`kv_scales` exposes as a [P, page_size, n_kv] view. `allocate_kv` builds the pages and that view.
"""

from __future__ import annotations

import torch

from hinfer.kv_format import KVFormat, kv_format_of

INT8_MAX = 127.0


def kv_format(cache: torch.Tensor) -> KVFormat:
    return kv_format_of(str(cache.dtype))


def allocate_kv(
    layers: int, pages: int, page_size: int, n_kv: int, head_dim: int, dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pages [layers, P, page_rows, n_kv, D] zeroed, token-row view [layers, P, page_size, n_kv, D])."""
    rows = kv_format_of(str(dtype)).page_rows(page_size, head_dim)
    full = torch.zeros((layers, pages, rows, n_kv, head_dim), dtype=dtype, device=device)
    return full, full[:, :, :page_size]


def kv_scales(cache: torch.Tensor) -> torch.Tensor | None:
    """[..., P, page_size, n_kv] fp32 view of an int8 cache view's scales (they follow each page's token rows
    in the same storage); None for unscaled formats."""
    if not kv_format(cache).scaled:
        return None
    page, n_kv = cache.shape[-3], cache.shape[-2]
    lead, lead_strides = cache.shape[:-3], cache.stride()[:-3]
    raw = torch.as_strided(
        cache, (*lead, page * n_kv * 4), (*lead_strides, 1), cache.storage_offset() + page * cache.stride(-3)
    )
    return raw.view(torch.float32).unflatten(-1, (page, n_kv))


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (round(x / s) int8, s = amax / 127 fp32 [...]); an all-zero row gets s = 0 and zeros."""
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q = torch.floor(xf * inv[..., None] + 0.5).clamp_(-INT8_MAX, INT8_MAX)  # half up: the kernel's rounding
    return q.to(torch.int8), scale


def write_kv(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """Store x [T, n_kv, D] (already in the model dtype) at flat token slots (page * page_size + row)."""
    page_size = cache.shape[1]
    page, row = slots.long() // page_size, slots.long() % page_size
    scales = kv_scales(cache)
    if scales is None:
        cache[page, row] = x.to(cache.dtype)
        return
    q, s = quantize_int8(x)
    cache[page, row] = q
    scales[page, row] = s


def read_kv(cache: torch.Tensor, pages: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """The first n tokens of the given pages, [n, n_kv, D] in `dtype` (int8 rows times their scales in fp32)."""
    rows = cache.index_select(0, pages).reshape(-1, *cache.shape[2:])[:n]
    scales = kv_scales(cache)
    if scales is None:
        return rows.to(dtype)
    s = scales.index_select(0, pages).reshape(-1, cache.shape[2])[:n]
    return (rows.float() * s[..., None]).to(dtype)
