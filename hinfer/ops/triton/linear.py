"""Triton linear layers: y = x @ W^T for bf16, fp8 (e4m3) and int4 weights.

Decode sizes (M <= SKINNY_MAX_M rows of x) run `_skinny_kernel`, which streams W exactly once: each program owns
BLOCK_N rows of W and a 1/SPLIT_K slice of K and keeps every row of x (padded to BLOCK_M) against them, so the
weight bytes leave HBM once whatever M is. Two inner paths:
- BLOCK_M == 1 (M == 1, bf16/fp8): CUDA-core GEMV with an fp32 [BLOCK_N, BLOCK_K] accumulator reduced once.
  int4 at BLOCK_M == 1 runs its own GEMV (hinfer.ops.triton.linear_int4_gemv), which never reorders the weight.
- BLOCK_M >= 16: tensor cores on [BLOCK_N, BLOCK_K] x [BLOCK_K, BLOCK_M] (swap-AB: W is the wide operand).
Grouped formats (int4 group 128, fp8 128x128 blocks) take one scale per row per K-iteration and apply it to the
[BLOCK_N, BLOCK_M] partial product, so no per-element scale multiply is needed. Asymmetric int4 adds the
rank-1 zero-point term (8 - z) * sum_k(x) to the same partial.

Split-K (when N/BLOCK_N programs cannot fill the GPU, e.g. o_proj and down_proj with N = 5120) is reduced in the
same launch by the last program to arrive (hinfer.ops.triton.linear_splitk): deterministic, no host sync,
CUDA-graph capturable.

Prefill sizes go to cuBLAS (bf16), `torch._scaled_mm` (fp8 per-channel) or hinfer.ops.triton.linear_gemm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import pdl_kwargs, pdl_start
from hinfer.ops.triton.linear_gemm import e4m3_rne
from hinfer.ops.triton.linear_int4 import fast_int4_ok, int4_minus8
from hinfer.ops.triton.linear_int4_gemv import fast_gemv_ok, int4_gemv_kernel, use_tma, words_descriptor
from hinfer.ops.triton.linear_splitk import split_scratch, store_tile
from hinfer.ops.triton.tiles.forms import BF16, FP8_BLOCK, FP8_ROW, INT4, SkinnyConfig
from hinfer.ops.triton.tiles.linear import QGROUP, SKINNY_MAX_M, skinny_config

_FMT_CODE = {BF16: 0, FP8_ROW: 1, FP8_BLOCK: 2, INT4: 3}
QGROUP_C = tl.constexpr(QGROUP)


# The words path's codes come out as fp32 at 2^-120 of their value (the e4m3 exponent's bias 7 read under fp32's 127)
# and x is taken at 2^64, so that products stay normal fp32 numbers down to |w x| = 2^-62 (exact scalings: the
# products and sums are the conversion path's, in another order); the row's sum is scaled back by 2^56.
_WORDS_X = tl.constexpr(2.0**64)
_WORDS_UNSCALE = tl.constexpr(2.0**56)


@triton.jit
def _fp8_words_dot(w_rows, x_ptr, k0, K, n_ok, EVEN: tl.constexpr, BLOCK_K: tl.constexpr):
    """[BLOCK_N, BLOCK_K / 4] fp32 partial products of BLOCK_K e4m3 codes a row (32-bit words of four codes, byte i
    of word j at K index 4j + i) with x: each code's sign and 7 exponent-mantissa bits moved into a bf16's place
    (sign, 4 low exponent bits, 3 high mantissa bits), two codes a 32-bit word, then widened to fp32 by a shift. An
    e4m3 subnormal lands on an fp32 subnormal of the same scaled value, so every code, zero included, is exact."""
    rj = k0 // 4 + tl.arange(0, BLOCK_K // 4)
    if EVEN:
        words = tl.load(w_rows + rj[None, :])
    else:
        words = tl.load(w_rows + rj[None, :], mask=n_ok[:, None] & (rj < K // 4)[None, :], other=0)
    u = words.to(tl.uint32, bitcast=True)
    even = ((u << 8) & 0x80008000) | ((u << 4) & 0x07F007F0)  # codes 0 and 2 of each word as two bf16s
    odd = (u & 0x80008000) | ((u >> 4) & 0x07F007F0)  # codes 1 and 3
    w0 = (even << 16).to(tl.float32, bitcast=True)
    w1 = (odd << 16).to(tl.float32, bitcast=True)
    w2 = (even & 0xFFFF0000).to(tl.float32, bitcast=True)
    w3 = (odd & 0xFFFF0000).to(tl.float32, bitcast=True)
    rk = k0 + 4 * tl.arange(0, BLOCK_K // 4)
    xs = x_ptr + rk
    if EVEN:
        x0 = tl.load(xs).to(tl.float32)
        x1 = tl.load(xs + 1).to(tl.float32)
        x2 = tl.load(xs + 2).to(tl.float32)
        x3 = tl.load(xs + 3).to(tl.float32)
    else:
        x0 = tl.load(xs, mask=rk < K, other=0.0).to(tl.float32)
        x1 = tl.load(xs + 1, mask=rk < K, other=0.0).to(tl.float32)
        x2 = tl.load(xs + 2, mask=rk < K, other=0.0).to(tl.float32)
        x3 = tl.load(xs + 3, mask=rk < K, other=0.0).to(tl.float32)
    part = w0 * (x0 * _WORDS_X)[None, :]
    part += w1 * (x1 * _WORDS_X)[None, :]
    part += w2 * (x2 * _WORDS_X)[None, :]
    part += w3 * (x3 * _WORDS_X)[None, :]
    return part


@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr,
    M, N, K,
    stride_xm, stride_ym, stride_wn, stride_sn,
    FMT: tl.constexpr, HAS_ZERO: tl.constexpr, FAST_INT4: tl.constexpr, EVEN_N: tl.constexpr,
    EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, A8: tl.constexpr = False, PDL: tl.constexpr = False, WORDS: tl.constexpr = False,
):  # fmt: skip
    pdl_start(PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_ok = rn < N
    m_ok = rm < M
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_lo = pid_k * per_split
    k_hi = tl.minimum(k_lo + per_split, K)
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    if FMT == 2:
        s_rows = s_ptr + (rn // 128) * stride_sn  # fp8 128x128 blocks
    else:
        s_rows = s_ptr + rn * stride_sn
    last_group = tl.cdiv(K, QGROUP_C) - 1
    if FMT >= 2:  # group scales are loaded one K-step ahead: their latency overlaps a whole step
        s_next = tl.load(s_rows + tl.minimum(k_lo // QGROUP_C, last_group), mask=n_ok, other=0.0)
        if HAS_ZERO:
            z_next = tl.load(z_ptr + rn * stride_sn + tl.minimum(k_lo // QGROUP_C, last_group), mask=n_ok, other=8)
    if WORDS:
        acc2 = tl.zeros([BLOCK_N, BLOCK_K // 4], dtype=tl.float32)
    elif BLOCK_M == 1:
        acc2 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if WORDS:  # fp8, one row of x (w_ptr: the codes as int32 words, stride_wn in words)
            part = _fp8_words_dot(w_rows, x_ptr, k0, K, n_ok, EVEN_N and EVEN_K, BLOCK_K)
            if FMT == 2:  # 128x128 blocks: one scale a row for the whole K-step, on the step's partial products
                part = part * s_next.to(tl.float32)[:, None]
                s_next = tl.load(s_rows + tl.minimum((k0 + BLOCK_K) // QGROUP_C, last_group), mask=n_ok, other=0.0)
            acc2 += part
        else:
            rk = k0 + tl.arange(0, BLOCK_K)
            if FMT == 3:
                rw = k0 // 8 + tl.arange(0, BLOCK_K // 8)
                if EVEN_N and EVEN_K:
                    words = tl.load(w_rows + rw[None, :])
                else:
                    words = tl.load(w_rows + rw[None, :], mask=n_ok[:, None] & (rw < K // 8)[None, :], other=0)
                w = int4_minus8(words, BLOCK_N, BLOCK_K, FAST_INT4)
            else:
                if EVEN_N and EVEN_K:
                    w = tl.load(w_rows + rk[None, :])
                else:
                    w = tl.load(w_rows + rk[None, :], mask=n_ok[:, None] & (rk < K)[None, :], other=0.0)
            if FMT >= 2:  # grouped: this K-step lies inside one 128-group
                s = s_next.to(tl.float32)
                g_next = tl.minimum((k0 + BLOCK_K) // QGROUP_C, last_group)
                s_next = tl.load(s_rows + g_next, mask=n_ok, other=0.0)
                if HAS_ZERO:
                    z = z_next.to(tl.float32)
                    z_next = tl.load(z_ptr + rn * stride_sn + g_next, mask=n_ok, other=8)
            if BLOCK_M == 1:
                if EVEN_K:
                    x = tl.load(x_ptr + rk).to(tl.float32)
                else:
                    x = tl.load(x_ptr + rk, mask=rk < K, other=0.0).to(tl.float32)
                wf = w.to(tl.float32)
                if FMT >= 2:
                    wf = wf * s[:, None]
                acc2 += wf * x[None, :]
            else:
                x_ptrs = x_ptr + rm[None, :] * stride_xm + rk[:, None]
                if EVEN_K:
                    xt = tl.load(x_ptrs, mask=m_ok[None, :], other=0.0)
                else:
                    xt = tl.load(x_ptrs, mask=m_ok[None, :] & (rk < K)[:, None], other=0.0)
                if A8:  # fp8 weights, W8A8: x to e4m3 per row and 128-group here; the weight tile feeds the MMA as loaded
                    xf = xt.to(tl.float32)
                    sx = tl.math.div_rn(tl.maximum(tl.max(tl.abs(xf), axis=0), 1e-12), 448.0)
                    xq = e4m3_rne(tl.clamp(tl.math.div_rn(xf, sx[None, :]), -448.0, 448.0)).to(tl.float8e4nv)
                    part = tl.dot(w, xq) * sx[None, :]
                else:
                    part = tl.dot(w.to(tl.bfloat16), xt.to(tl.bfloat16))
                if HAS_ZERO:  # (u - z) x = (u - 8) x + (8 - z) x
                    xsum = tl.sum(xt.to(tl.bfloat16).to(tl.float32), axis=0)
                    part += (8.0 - z)[:, None] * xsum[None, :]
                if FMT >= 2:
                    part = part * s[:, None]
                acc += part
    if BLOCK_M == 1:
        acc = tl.sum(acc2, axis=1)[:, None]
    if WORDS:
        acc = acc * _WORDS_UNSCALE
    if FMT == 1:  # fp8 per output channel
        acc = acc * tl.load(s_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    tile = pid_m * tl.num_programs(0) + pid_n
    store_tile(acc, rn, rm, n_ok, m_ok, y_ptr, stride_ym, part_ptr, cnt_ptr, M, N, pid_k, tile,
               SPLIT_K, BLOCK_N, BLOCK_M)  # fmt: skip


def skinny_matmul(
    x: torch.Tensor,
    fmt: str,
    w: torch.Tensor,
    n: int,
    scale: torch.Tensor | None = None,
    zero: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    cfg: SkinnyConfig | None = None,
    a8: bool = False,
) -> torch.Tensor:
    """y [M, n] = x [M, K] @ W^T for one weight format, streaming W once. `out` may be a column slice of a
    wider row-major buffer (its row stride is honoured). `a8` (fp8 weights, M >= 2): W8A8, x quantized to e4m3
    per row and 128-group inside the kernel (reference: hinfer.quant.fp8.Fp8Weight.matmul_ref_w8a8_decode)."""
    m, k = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    cfg = cfg or skinny_config(fmt, m, n, k)
    gemv_int4 = fmt == INT4 and cfg.block_m == 1
    if cfg.block_m == 1 and m != 1:
        raise ValueError("the GEMV path (block_m 1) takes exactly one row of x")
    if a8 and (fmt not in (FP8_ROW, FP8_BLOCK) or cfg.block_m == 1 or cfg.block_k != QGROUP):
        raise ValueError(f"W8A8 decode takes fp8 weights on the tensor-core path with block_k {QGROUP}")
    if gemv_int4 and cfg.block_k % QGROUP:
        raise ValueError(f"the int4 GEMV steps whole groups: block_k a multiple of {QGROUP}, got {cfg.block_k}")
    if fmt in (FP8_BLOCK, INT4) and not gemv_int4 and QGROUP % cfg.block_k:
        raise ValueError(f"grouped formats need block_k dividing {QGROUP}, got {cfg.block_k}")
    if fmt == INT4 and (k % 8 or w.shape[-1] != k // 8):
        raise ValueError(f"int4 needs K % 8 == 0 and packed words [N, K/8]; K={k}, words {tuple(w.shape)}")
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    assert out.shape == (m, n) and out.stride(-1) == 1
    if m == 0:
        return out
    grid = (triton.cdiv(n, cfg.block_n), cfg.split_k, triton.cdiv(m, cfg.block_m))
    part, cnt = split_scratch(cfg.split_k, m, n, grid[0] * grid[2], x, out)
    s = scale if scale is not None else w
    if gemv_int4:
        if x.data_ptr() % 4:
            x = x.clone()  # the GEMV reads x as int32 pairs of bf16
        groups = cfg.block_k // QGROUP
        n_groups = triton.cdiv(k, QGROUP)
        even = n % cfg.block_n == 0 and k % QGROUP == 0 and n_groups % (groups * cfg.split_k) == 0
        tma = use_tma(w)
        w_arg = words_descriptor(w, cfg.block_n, 16 * groups) if tma else w
        int4_gemv_kernel[grid[:2]](
            x, w_arg, s, zero if zero is not None else s, out, part, cnt, n, k, w.stride(0), s.stride(0),
            HAS_ZERO=zero is not None, FAST=x.is_cuda and fast_gemv_ok(x.device.index or 0), EVEN=even,
            BLOCK_N=cfg.block_n, GROUPS=groups, SPLIT_K=cfg.split_k,
            PREFETCH=1 if tma else min(cfg.num_stages - 1, 2), TMA=tma, STAGES=cfg.num_stages if tma else 1,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
        return out
    fast = fmt == INT4 and zero is None and x.is_cuda and fast_int4_ok(x.device.index or 0)
    words = cfg.words
    if words and (fmt not in (FP8_ROW, FP8_BLOCK) or cfg.block_m != 1 or k % 4 or w.stride(0) % 4 or cfg.block_k % 4):
        raise ValueError("the words path takes fp8 weights at one row, K and the row stride in words")
    w_arg, stride_wn = (w.view(torch.int32), w.stride(0) // 4) if words else (w, w.stride(0))
    _skinny_kernel[grid](
        x, w_arg, s, zero if zero is not None else s, out, part, cnt,
        m, n, k,
        x.stride(0), out.stride(0), stride_wn, s.stride(0) if s.dim() > 1 else 1,
        FMT=_FMT_CODE[fmt], HAS_ZERO=zero is not None, FAST_INT4=fast,
        EVEN_N=n % cfg.block_n == 0, EVEN_K=k % cfg.block_k == 0,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT_K=cfg.split_k, A8=a8, WORDS=words,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_kwargs(x),
    )  # fmt: skip
    return out


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T: the Triton stream for decode sizes, cuBLAS above."""
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k)
    n = weight.shape[0]
    if x2.shape[0] > SKINNY_MAX_M[BF16] or weight.stride(-1) != 1:
        y = torch.nn.functional.linear(x2, weight)
        if out is not None:
            out.copy_(y)
            return out
        return y.reshape(*lead, n)
    return skinny_matmul(x2, BF16, weight, n, out=out).reshape(*lead, n)
