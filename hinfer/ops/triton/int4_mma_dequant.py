"""Fragment-ordered int4 weights (hinfer.quant.int4_mma_layout) back into the forms the prefill GEMMs read, the
prefill paths of Int4MmaWeight: dequantized into a bf16 [N, K] matrix (the scratch feeds cuBLAS), or into e4m3
with one scale per row (cuBLAS fp8 rowwise), or as u - z in e4m3 (cuBLAS fp8 with 1 x 128 scales), or repacked
into hinfer.quant.int4's rows (int32 [N, K/8], for the w4a16 / w4a8 GEMMs). Each program writes STRIPES 16-row
stripes of one 128-group; it reads that group's 1 KB of words per stripe (gathered: every word is read by 8
outputs, from cache).

Inverse of the layout, for row r of a stripe and offset kk of group G: t = kk // 32, kt = kk % 32 // 4,
k3 = kk % 4 // 2, k0 = kk % 2 (hinfer.quant.int4_mma_layout.real_k); k16 step 8 G + kt = 4 kc + j; lane
4 (r % 8) + t; fragment element e = k0 + 2 (r // 8) + 4 k3 at nibble position e // 2 + 4 (e % 2) of word
(32 kc + lane) * 4 + j. Value (u - z) * s in fp32, rounded once (as Int4Weight.dequantize).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import GROUP as GROUP_K  # quantization group along K


@triton.jit
def _nibbles(w_ptr, stripe, rs, kk, grp, K):
    """The nibble u of row rs of `stripe` at offset kk of group grp (broadcast shapes), from the words."""
    t, kt, k3, k0 = kk // 32, (kk % 32) // 4, (kk % 4) // 2, kk % 2
    step = grp * 8 + kt
    lane = 4 * (rs % 8) + t
    e = k0 + 2 * (rs // 8) + 4 * k3
    q = ((step // 4) * 32 + lane) * 4 + step % 4
    word = tl.load(w_ptr + stripe.to(tl.int64) * (2 * K) + q)
    return (word >> (4 * (e // 2 + 4 * (e % 2)))) & 0xF


@triton.jit
def _int4_mma_rows_kernel(w_ptr, out_ptr, K, STRIPES: tl.constexpr):
    pid_s = tl.program_id(0)
    grp = tl.program_id(1)
    r = tl.arange(0, 16 * STRIPES)[:, None, None]  # row within the program's stripes
    c = tl.arange(0, 16)[None, :, None]  # word of the group in the row layout
    e = tl.arange(0, 8)[None, None, :]  # element of that word: K offset 8 c + e, at nibble POS[e]
    stripe = pid_s * STRIPES + r // 16
    u = _nibbles(w_ptr, stripe, r % 16, 8 * c + e, grp, K)
    word = tl.sum(u << (4 * (e // 2 + 4 * (e % 2))), axis=2)  # disjoint bits: the sum is their OR
    row = (pid_s * 16 * STRIPES + tl.arange(0, 16 * STRIPES)[:, None]).to(tl.int64)  # the same rows, 2-D
    tl.store(out_ptr + row * (K // 8) + grp * 16 + tl.arange(0, 16)[None, :], word)


# what the dequantization writes: the value (u - z) s, rounded to the output (bf16); value / row scale in e4m3
# (hinfer.quant.int4.fp8_row_scale); or u - z alone in e4m3 (exact: |u - z| <= 15), the group scales applied by
# the GEMM that reads it
SCALED, ROW_SCALED, UNSCALED = 0, 1, 2
_ROW_SCALED, _UNSCALED = tl.constexpr(ROW_SCALED), tl.constexpr(UNSCALED)  # the kernels' copies
# The prefill scratch is written by the kernel that reads each word once (H200, the 27B's four int4 shapes: the bf16
# scratch 427 -> 396 us, e4m3 rows 406 -> 380; its 8K prefill +0.3-0.5% in two interleaved pairs);
# HINFER_INT4_DEQUANT=gather: each output gathers its word (the first form, bit-equal)
COALESCED = os.environ.get("HINFER_INT4_DEQUANT", "coalesced") != "gather"


@triton.jit
def _write(u, row, grp, s_ptr, z_ptr, rs_ptr, out_ptr, N, K, HAS_ZERO: tl.constexpr, FORM: tl.constexpr):
    """Rows `row` [R, 1] of group grp of the scratch from their nibbles u [R, 128] (fp32), in the form FORM."""
    if HAS_ZERO:
        z = tl.load(z_ptr + grp * N + row).to(tl.float32)
    else:
        z = 8.0
    w = u - z
    if FORM != _UNSCALED:
        w = w * tl.load(s_ptr + grp * N + row).to(tl.float32)
    if FORM == _ROW_SCALED:  # its reach is the row's largest |w|: 448
        w = tl.clamp(w / tl.load(rs_ptr + row), -448.0, 448.0)
    kk = tl.arange(0, 128)[None, :]
    tl.store(out_ptr + row.to(tl.int64) * K + grp * 128 + kk, w.to(out_ptr.dtype.element_ty))


@triton.jit
def _int4_mma_dequant_kernel(
    w_ptr, s_ptr, z_ptr, rs_ptr, out_ptr, N, K, HAS_ZERO: tl.constexpr, FORM: tl.constexpr, STRIPES: tl.constexpr
):
    pid_s = tl.program_id(0)
    grp = tl.program_id(1)
    r = tl.arange(0, 16 * STRIPES)[:, None]  # row within the program's stripes
    kk = tl.arange(0, 128)[None, :]
    stripe = pid_s * STRIPES + r // 16
    rs = r % 16
    u = _nibbles(w_ptr, stripe, rs, kk, grp, K).to(tl.float32)
    _write(u, stripe * 16 + rs, grp, s_ptr, z_ptr, rs_ptr, out_ptr, N, K, HAS_ZERO, FORM)


@triton.jit
def _int4_mma_dequant_coalesced_kernel(
    w_ptr, s_ptr, z_ptr, rs_ptr, out_ptr, N, K, HAS_ZERO: tl.constexpr, FORM: tl.constexpr, STRIPES: tl.constexpr
):
    """_int4_mma_dequant_kernel reading each word once: a stripe's 256 words of the group in one coalesced load as
    [kc, g, t, j] (word (32 kc + 4 g + t) 4 + j), its 8 nibbles spread to [k3, r3, k0] (position r3 + 2 k3 + 4 k0),
    then moved to (row 8 r3 + g, K offset 32 t + 16 kc + 4 j + 2 k3 + k0) by a permute in registers."""
    pid_s = tl.program_id(0)
    grp = tl.program_id(1)
    stripe = (pid_s * STRIPES + tl.arange(0, STRIPES))[:, None].to(tl.int64)
    words = tl.load(w_ptr + stripe * (2 * K) + grp * 256 + tl.arange(0, 256)[None, :])
    words = tl.reshape(words, [STRIPES, 2, 8, 4, 4, 1, 1, 1])
    k3 = tl.arange(0, 2)[:, None, None]
    r3 = tl.arange(0, 2)[None, :, None]
    k0 = tl.arange(0, 2)[None, None, :]
    shift = tl.reshape(4 * (r3 + 2 * k3 + 4 * k0), [1, 1, 1, 1, 1, 2, 2, 2])
    u = (words >> shift) & 0xF  # [S, kc, g, t, j, k3, r3, k0]
    u = tl.permute(u, (0, 6, 2, 3, 1, 4, 5, 7))  # [S, r3, g, t, kc, j, k3, k0]
    u = tl.reshape(u, [STRIPES * 16, 128]).to(tl.float32)
    row = pid_s * STRIPES * 16 + tl.arange(0, STRIPES * 16)[:, None]
    _write(u, row, grp, s_ptr, z_ptr, rs_ptr, out_ptr, N, K, HAS_ZERO, FORM)


def int4_mma_dequantize(
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    n: int,
    k: int,
    stripes: int = 4,
    row_scale: torch.Tensor | None = None,
    unscaled: bool = False,
    coalesced: bool | None = None,
) -> torch.Tensor:
    """words int32 [N/16, 2K], scales [G, N], zeros [G, N] uint8 or None -> bf16 [N, K]; with row_scale (fp32
    [N]) -> e4m3 [N, K] of value / row_scale[n], rounded once (hinfer.quant.int4.fp8_row_scale); unscaled ->
    e4m3 [N, K] of u - z, exact. `coalesced` (default: COALESCED) reads each word once and moves nibbles in
    registers, instead of each output gathering its word."""
    form = UNSCALED if unscaled else ROW_SCALED if row_scale is not None else SCALED
    out = torch.empty((n, k), dtype=torch.bfloat16 if form == SCALED else torch.float8_e4m3fn, device=words.device)
    while (n // 16) % stripes:
        stripes //= 2
    grid = (n // 16 // stripes, k // GROUP_K)
    kernel = _int4_mma_dequant_coalesced_kernel if (COALESCED if coalesced is None else coalesced) else \
        _int4_mma_dequant_kernel
    kernel[grid](
        words, scales, zeros if zeros is not None else scales, row_scale if row_scale is not None else scales,
        out, n, k, HAS_ZERO=zeros is not None, FORM=form, STRIPES=stripes, num_warps=4,
    )  # fmt: skip
    return out


def int4_mma_rows(words: torch.Tensor, n: int, k: int, stripes: int = 4) -> torch.Tensor:
    """words int32 [N/16, 2K] -> hinfer.quant.int4's packed rows int32 [N, K/8] (unpermute_words' result)."""
    out = torch.empty((n, k // 8), dtype=torch.int32, device=words.device)
    while (n // 16) % stripes:
        stripes //= 2
    _int4_mma_rows_kernel[(n // 16 // stripes, k // GROUP_K)](words, out, k, STRIPES=stripes, num_warps=4)
    return out
