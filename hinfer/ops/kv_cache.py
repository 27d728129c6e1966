"""Reading and writing the paged KV cache in its storage format (hinfer.kv_format): the torch bodies.

The ops take a layer's K (or V) cache as the view of its token rows, [P, page_size, n_kv, head_dim / pack];
its element type names the format (int8: int8 codes, a scale per token and head; uint8: int4 nibble pairs, a
scale per 64 values). The scales follow each page's token rows in the same storage; `kv_scales` exposes them
as a [P, page_size, n_kv] (int8) or [P, page_size, n_kv, groups] (int4) fp32 view. `allocate_kv` builds the
pages. An int4 K cache holds rotated keys (`rotate_for_cache`, hinfer.kv_format.rotated_keys).
"""

from __future__ import annotations

import torch

from hinfer.kv_format import INT4_GROUP, CacheFormat, cache_format_of, rotated_keys

INT8_MAX = 127.0
INT4_MAX = 7.0  # codes in [-7, 7], stored as code + 8 in a nibble


def cache_format(cache: torch.Tensor) -> CacheFormat:
    return cache_format_of(str(cache.dtype))


def allocate_kv(
    layers: int,
    pages: int,
    page_size: int,
    n_kv: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(pages [layers, P, page_rows, n_kv, D / pack] zeroed, token-row view [layers, P, page_size, n_kv,
    D / pack])."""
    fmt = cache_format_of(str(dtype))
    full = torch.zeros((layers, pages, fmt.page_rows(page_size, head_dim), n_kv, fmt.row_elems(head_dim)),
                       dtype=dtype, device=device)  # fmt: skip
    return full, full[:, :, :page_size]


def kv_scales(cache: torch.Tensor) -> torch.Tensor | None:
    """The fp32 scales stored after each page's token rows of a scaled cache view (same storage):
    [..., P, page_size, n_kv] for int8, [..., P, page_size, n_kv, groups] for int4; None when unscaled."""
    fmt = cache_format(cache)
    if not fmt.scaled:
        return None
    page, n_kv = cache.shape[-3], cache.shape[-2]
    groups = fmt.groups(cache.shape[-1] * fmt.pack)
    lead, lead_strides = cache.shape[:-3], cache.stride()[:-3]
    n_bytes = page * n_kv * groups * 4 // cache.element_size()
    raw = torch.as_strided(
        cache, (*lead, n_bytes), (*lead_strides, 1), cache.storage_offset() + page * cache.stride(-3)
    )
    s = raw.view(torch.float32)
    return s.unflatten(-1, (page, n_kv)) if fmt.group == 0 else s.unflatten(-1, (page, n_kv, groups))


def _scale(amax: torch.Tensor, qmax: int) -> torch.Tensor:
    # a tensor divisor: CUDA torch turns division by a Python scalar into a multiply by its reciprocal, an ulp
    # away from the IEEE quotient the kernels compute
    return amax / torch.full_like(amax, qmax)


def _round_half_up(x: torch.Tensor) -> torch.Tensor:
    return torch.floor(x + 0.5)  # the kernels' rounding (ties are measure-zero on real data anyway)


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (round(x / s) int8, s = amax / 127 fp32 [...]); an all-zero row gets s = 0 and zeros."""
    xf = x.float()
    scale = _scale(xf.abs().amax(dim=-1), INT8_MAX)
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q = _round_half_up(xf * inv[..., None]).clamp_(-INT8_MAX, INT8_MAX)
    return q.to(torch.int8), scale


def quantize_int4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (nibble pairs uint8 [..., D / 2], s = amax / 7 fp32 [..., D / 64] per group of 64)."""
    xf = x.float().unflatten(-1, (-1, INT4_GROUP))
    scale = _scale(xf.abs().amax(dim=-1), INT4_MAX)
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q = _round_half_up(xf * inv[..., None]).clamp_(-INT4_MAX, INT4_MAX).flatten(-2)
    u = (q + 8).to(torch.uint8)
    return u[..., 0::2] | (u[..., 1::2] << 4), scale


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Nibble pairs [..., D / 2] and group scales [..., D / 64] -> fp32 [..., D]."""
    lo, hi = (packed & 15).float() - 8, (packed >> 4).float() - 8
    q = torch.stack([lo, hi], dim=-1).flatten(-2)
    return (q.unflatten(-1, (-1, INT4_GROUP)) * scale[..., None]).flatten(-2)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """H x along the last dim (D a power of two; H the Sylvester Hadamard matrix, entries +-1, H H = D I) in
    fp32, in the butterfly order the write kernel uses (so both round alike): log2 D times, x <- the pairs
    (a_i + b_i, a_i - b_i) of its halves a, b, interleaved."""
    x = x.float()
    for _ in range(x.shape[-1].bit_length() - 1):
        a, b = x.unflatten(-1, (2, -1)).unbind(-2)
        x = torch.stack((a + b, a - b), dim=-1).flatten(-2)
    return x


def rotate_for_cache(
    q: torch.Tensor, k: torch.Tensor, k_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, k) in the basis the K cache stores: for rotated keys H q / D rounded to q's dtype and H k in fp32
    (which the cache write quantizes), else as given. D is a power of two: 1 / D is exact, q . k unchanged."""
    if not rotated_keys(cache_format(k_cache)):
        return q, k
    return (hadamard(q) / q.shape[-1]).to(q.dtype), hadamard(k)


def write_kv(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """Store x [T, n_kv, D] (in the model dtype, or rotated keys in fp32) at flat token slots
    (page * page_size + row)."""
    page_size = cache.shape[1]
    page, row = slots.long() // page_size, slots.long() % page_size
    fmt, scales = cache_format(cache), kv_scales(cache)
    if scales is None:
        cache[page, row] = x.to(cache.dtype)
        return
    q, s = quantize_int8(x) if fmt.pack == 1 else quantize_int4(x)
    cache[page, row] = q
    scales[page, row] = s


def read_kv(cache: torch.Tensor, pages: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """The first n tokens of the given pages, [n, n_kv, D] in `dtype` (scaled formats: codes times their
    scales in fp32, then rounded)."""
    rows = cache.index_select(0, pages).reshape(-1, *cache.shape[2:])[:n]
    scales = kv_scales(cache)
    if scales is None:
        return rows.to(dtype)
    s = scales.index_select(0, pages).reshape(-1, *scales.shape[2:])[:n]
    if cache_format(cache).pack == 1:
        return (rows.float() * s[..., None]).to(dtype)
    return dequantize_int4(rows, s).to(dtype)
