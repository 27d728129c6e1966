"""A sequence's tokens read back from the paged KV cache in the model dtype, heads first: the Triton twin of
`hinfer.ops.kv_cache.read_kv` (bit for bit: codes times scales in fp32, rounded once), in one pass.

The cuDNN prefill attention (attention_cudnn) wants each part's keys and values contiguous; the torch body reads
a quantized block in five or six passes of fp32 temporaries, which at 2K-token chunks costs about a fifth of
the part's attention time for int4 caches. This kernel reads each tile once through `load_tile` (the same
conversion code as the attention kernels) and writes [Hkv, tokens, D] rows, cuDNN's preferred layout.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.attention_common import cache_args, load_tile
from hinfer.ops.triton.common import cast, interpreted

BLOCK_N = 32


@triton.jit
def _read_kv_kernel(
    c_ptr, s_ptr, pages_ptr, out_ptr, start, n, rows,
    stride_p, stride_t, stride_h, s_p, s_t, s_h,
    D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, FMT: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    kvh = tl.program_id(1)
    mask = i < n
    tok = start + i
    page = tl.load(pages_ptr + tok // PAGE, mask=mask, other=0).to(tl.int64)
    x, scale = load_tile(c_ptr, page, tok % PAGE, stride_p, stride_t, kvh * stride_h, mask, s_ptr, s_p, s_t, s_h,
                         kvh, tl.float32, D, BLOCK_N, EMU, FMT)  # fmt: skip
    if FMT == 1:  # INT8: the per-token scale comes back beside the tile
        x = x * scale[:, None]
    d = tl.arange(0, D)
    dst = out_ptr + kvh.to(tl.int64) * rows * D + i[:, None].to(tl.int64) * D + d[None, :]
    tl.store(dst, cast(x, out_ptr.dtype.element_ty, EMU), mask=mask[:, None])


def read_kv_heads(
    cache: torch.Tensor,  # [P, page, Hkv, D / pack] token rows (scales after each page's, as kv_scales reads)
    pages: torch.Tensor,  # the sequence's page ids (int32 / int64)
    start: int,
    stop: int,
    dtype: torch.dtype,
    head_dim: int,
    rows: int | None = None,
) -> torch.Tensor:
    """Tokens [start, stop) of the sequence, [Hkv, rows, head_dim] contiguous in `dtype`: `rows` (default
    stop - start) may be more, the extra rows zero."""
    n, n_kv = stop - start, cache.shape[2]
    rows = n if rows is None else rows
    out = torch.empty((n_kv, rows, head_dim), dtype=dtype, device=cache.device)
    out[:, n:].zero_()  # the kernel writes the first n rows
    if n == 0:
        return out
    s, s_p, s_t, s_h, fmt = cache_args(cache)
    grid = (triton.cdiv(n, BLOCK_N), n_kv)
    _read_kv_kernel[grid](
        cache, s, pages, out, start, n, rows, cache.stride(0), cache.stride(1), cache.stride(2), s_p, s_t, s_h,
        D=head_dim, PAGE=cache.shape[1], BLOCK_N=BLOCK_N, FMT=fmt, EMU=interpreted(_read_kv_kernel),
    )  # fmt: skip
    return out
