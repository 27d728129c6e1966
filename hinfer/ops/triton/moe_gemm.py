"""Expert GEMM kernels: gate_up (+SiLU*up), down (x routing weight), and the sum over a token's k slots.

Grouped path: rows are (token, slot) pairs grouped by expert (moe_align); program (block, n-block) multiplies
the block's rows by one N-slice of its expert's weight, so an expert's weight is read once per BM-row block
(once in total when its pairs fit one block, as in decode). Two layouts of the same tile:
- SWAP (decode, few rows per expert): acc[BN, BM] = W[BN, BK] @ X^T[BK, BM]. The weight is the wide MMA
  operand and its rows are read along K (contiguous); BM = 16 pads the handful of tokens.
- plain (prefill): acc[BM, BN] = X[BM, BK] @ W^T[BK, BN] with BM = 64/128 rows of one expert.
DIRECT (T == 1): the k pairs are k distinct experts, so block b is pair b alone and no alignment runs.
gate_up keeps two accumulators (gate rows n, up rows I + n) and writes act = silu(g) * u for the pair;
down writes y[pair] = (act @ W_down^T) * routing weight, and `_sum_slots_kernel` adds a token's k rows of y
(or, with SUM_SLOTS at T == 1, one down program loops over all k experts and writes the token's output).
Every intermediate is indexed by pair (t * k + s): no row is written twice and no atomics touch data.

GEMV path (T == 1, bf16 weights only; int4 and fp8 take the DIRECT tiles): CUDA-core dot products with an
fp32 [BN, BK] accumulator, no tensor cores.

Weights are read only in `_mma` (and the GEMV loads): FMT 0 = bf16/fp32 [E, N, K]; FMT 1 = int4 W4A16 in
hinfer.quant.int4's layout per expert (int32 words [E, N, K/8], scales [E, N, K/128], optional uint8 zeros).
The int4 tile is unpacked to the exact integers u - 8 in bf16; the group's scale (and the zero-point term
(8 - z) * sum_k a) is applied to the fp32 partial product of each K-step, which lies inside one group (BK
divides 128). FMT 2 = fp8 e4m3 W8A16, hinfer.quant.fp8's layout per expert: float8_e4m3fn [E, N, K] and fp32
scales read as scale[(row0 + n) // SCALE_ROWS, (k0 // 128) * SCALE_KSTEP] (two constexprs): per channel [E, N]
(SCALE_ROWS 1, SCALE_KSTEP 0) or 128x128 blocks [E, ceil(N/128), ceil(K/128)] (128, 1). The e4m3 tile converts
exactly to the activation dtype; the row's scale for the K-step multiplies the fp32 partial product (SWAP) or
the tile (plain), as for int4. Sums are fp32; act and y are rounded once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from hinfer.ops.triton import common
from hinfer.ops.triton.common import cast, pdl_start
from hinfer.ops.triton.linear_int4 import int4_minus8

GROUP = tl.constexpr(common.GROUP)


@triton.jit
def _silu_mul(g, u):
    return g / (1.0 + tl.exp(-g)) * u


@triton.jit
def _block_rows(sorted_ptr, bexp_ptr, brows_ptr, ids_ptr, blk, BM: tl.constexpr, DIRECT: tl.constexpr):
    """-> (expert of the block (-1: none), pair index per row (0 on padding rows), row mask)."""
    r = tl.arange(0, BM)
    if DIRECT:
        e = tl.load(ids_ptr + blk).to(tl.int32)
        ok = r < 1
        pair = r * 0 + blk
    else:
        e = tl.load(bexp_ptr + blk)
        ok = r < tl.load(brows_ptr + blk)
        pair = tl.load(
            sorted_ptr + blk * BM + r, mask=ok, other=0
        )  # padding rows re-read pair 0, never stored
    return e, pair, ok


@triton.jit
def _load_k(ptrs, k0, offs_k, K, K_AXIS: tl.constexpr, EVEN_K: tl.constexpr):
    """Load a 2-D tile whose axis K_AXIS runs over k0 + offs_k (masked past K unless EVEN_K)."""
    if EVEN_K:
        v = tl.load(ptrs)
    elif K_AXIS == 0:
        v = tl.load(ptrs, mask=(k0 + offs_k < K)[:, None], other=0.0)
    else:
        v = tl.load(ptrs, mask=(k0 + offs_k < K)[None, :], other=0.0)
    return v


@triton.jit
def _a_tile(rows_base, k0, offs_k, K, SWAP: tl.constexpr, EVEN_K: tl.constexpr):
    """Activation rows (pointers rows_base [BM]) at columns k0 + offs_k: [BK, BM] if SWAP else [BM, BK]."""
    if SWAP:
        v = _load_k(rows_base[None, :] + (k0 + offs_k)[:, None], k0, offs_k, K, 0, EVEN_K)
    else:
        v = _load_k(rows_base[:, None] + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K)
    return v


@triton.jit
def paired_rows(rows, half):
    """The stored rows of a gate_up's logical `rows` ([gate | up], `half` = I rows each) in stripe_experts' order:
    8 gate rows, then the same columns' 8 up rows, a 16-row stripe."""
    return 16 * ((rows % half) // 8) + 8 * (rows // half) + rows % 8


@triton.jit
def _stripe_words(rows, k0, K, BK: tl.constexpr):
    """Offsets [BN, BK / 8] of words k0 / 8 .. (k0 + BK) / 8 of stored rows `rows` in stripe_experts' order
    (int4_mma_layout.stripe_word_offset): a row's 16 words of a 128-group are contiguous, the K-step inside one
    group (BK divides 128)."""
    row = tl.multiple_of((rows // 16) * (2 * K) + ((rows % 16) // 8) * 128 + (rows % 8) * 16, 16)
    col = (k0 // 128) * 256 + (k0 % 128) // 8 + tl.arange(0, BK // 8)
    col = tl.max_contiguous(tl.multiple_of(col, BK // 8), BK // 8)  # K-steps start at multiples of BK
    return row[:, None] + col[None, :]


@triton.jit
def _mma(
    a, w_base, s_base, z_base, offs_n, k0, offs_k, stride_wn, stride_sn, K, acc, scale,
    SWAP: tl.constexpr, FMT: tl.constexpr, HAS_ZERO: tl.constexpr, FAST_INT4: tl.constexpr,
    EVEN_K: tl.constexpr, PREC: tl.constexpr, EMU: tl.constexpr, ACC_IN_DOT: tl.constexpr,
    BN: tl.constexpr, BK: tl.constexpr, S_ROW0, SCALE_ROWS: tl.constexpr, SCALE_KSTEP: tl.constexpr,
    STRIPES: tl.constexpr = False, w_rows=None,
):  # fmt: skip
    """acc += (a x W[rows offs_n, k0:k0+BK]) * scale, in the SWAP ([BN, BM]) or plain ([BM, BN]) layout.
    `scale` multiplies the partial product (the routing weight of a summed slot) or is 1.0. ACC_IN_DOT (no
    per-step factor: bf16 weights or dequantized int4 / fp8 tiles, scale 1.0) chains the accumulator through the
    MMA; otherwise each step's partial product is scaled (int4 / fp8 SWAP: by the row's scale) and added.
    fp8 only (FMT 2): row n's scale is s_base[((S_ROW0 + n) // SCALE_ROWS) * stride_sn + (k0 // 128) *
    SCALE_KSTEP] (S_ROW0: the first row of this weight part in the fused scale grid, e.g. I for the up rows).
    int4 STRIPES: the words stripe by stripe (int4_mma_layout.stripe_experts), rows `w_rows` of the expert
    (paired_rows for a gate_up) found by _stripe_words."""
    if FMT == 0:
        if SWAP:
            w = _load_k(
                w_base + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K
            )
        else:
            w = _load_k(
                w_base + offs_n[None, :] * stride_wn + (k0 + offs_k)[:, None], k0, offs_k, K, 0, EVEN_K
            )
        g_scale = scale
    elif FMT == 2:  # fp8 e4m3 [BN, BK] -> the activation dtype (exact); one scale per row for this K-step
        w8 = _load_k(w_base + offs_n[:, None] * stride_wn + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K)
        srow = (S_ROW0 + offs_n) // SCALE_ROWS
        s = tl.load(s_base + srow * stride_sn + (k0 // GROUP) * SCALE_KSTEP).to(tl.float32)
        if SWAP:  # decode: scale the [BN, BM] partial product
            w = w8.to(a.dtype)
            g_scale = s[:, None] * scale
        else:  # prefill: dequantize the tile so the MMA chains one accumulator
            w = tl.trans(cast(w8.to(tl.float32) * s[:, None], a.dtype, EMU))
            g_scale = scale
    else:  # int4: words [BN, BK / 8] -> u - 8 in bf16 [BN, BK]; one scale per row for this K-step
        kw = k0 // 8 + tl.arange(0, BK // 8)
        if STRIPES:
            wp = w_base + _stripe_words(w_rows, k0, K, BK)
        else:
            wp = w_base + offs_n[:, None] * stride_wn + kw[None, :]
        if EVEN_K:
            words = tl.load(wp)
        else:
            words = tl.load(wp, mask=(kw < K // 8)[None, :], other=0)
        w = int4_minus8(words, BN, BK, FAST_INT4)
        s = tl.load(s_base + offs_n * stride_sn + k0 // GROUP).to(tl.float32)
        if SWAP:  # decode: scale the [BN, BM] partial product (cheaper than scaling the [BN, BK] tile)
            g_scale = s[:, None] * scale
        else:  # prefill: dequantize the tile to bf16 so the MMA chains one accumulator (registers)
            wf = w.to(tl.float32)
            if HAS_ZERO:
                wf += 8.0 - tl.load(z_base + offs_n * stride_sn + k0 // GROUP).to(tl.float32)[:, None]
            w = tl.trans(cast(wf * s[:, None], a.dtype, EMU))
            g_scale = scale
    if EMU:  # triton 3.6's interpreter multiplies the raw uint16 storage of bf16 dot operands
        a, w = a.to(tl.float32), w.to(tl.float32)
    if ACC_IN_DOT:
        if SWAP:
            acc = tl.dot(w, a, acc, input_precision=PREC)
        else:
            acc = tl.dot(a, w, acc, input_precision=PREC)
    else:
        if SWAP:
            part = tl.dot(w, a, input_precision=PREC)
        else:
            part = tl.dot(a, w, input_precision=PREC)
        if HAS_ZERO:  # (u - z) a = (u - 8) a + (8 - z) a, summed over this K-step (int4 SWAP only)
            z = tl.load(z_base + offs_n * stride_sn + k0 // GROUP).to(tl.float32)
            part += (8.0 - z)[:, None] * tl.sum(a.to(tl.float32), axis=0)[None, :]
        acc += part * g_scale
    return acc


@triton.jit
def _store_rows(out_ptr, pair, row_ok, pn, N, stride_o, val, SWAP: tl.constexpr,
                BN: tl.constexpr, EMU: tl.constexpr):  # fmt: skip
    """val is [BN, BM] if SWAP else [BM, BN]; rows go to out[pair, pn * BN + n]."""
    nn = pn * BN + tl.arange(0, BN)
    base = out_ptr + pair.to(tl.int64) * stride_o
    v = cast(val, out_ptr.dtype.element_ty, EMU)
    if SWAP:
        tl.store(base[None, :] + nn[:, None], v, mask=row_ok[None, :] & (nn < N)[:, None])
    else:
        tl.store(base[:, None] + nn[None, :], v, mask=row_ok[:, None] & (nn < N)[None, :])


@triton.jit
def _gate_up_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, act_ptr, sorted_ptr, bexp_ptr, brows_ptr, ids_ptr,
    N, K, stride_xt, stride_we, stride_wn, stride_se, stride_sn, stride_at,
    TOPK: tl.constexpr, DIRECT: tl.constexpr, SWAP: tl.constexpr, FMT: tl.constexpr, HAS_ZERO: tl.constexpr,
    FAST_INT4: tl.constexpr, EVEN_K: tl.constexpr, PREC: tl.constexpr, EMU: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    SCALE_ROWS: tl.constexpr, SCALE_KSTEP: tl.constexpr,
    PDL: tl.constexpr, STRIPES: tl.constexpr = False,
):  # fmt: skip
    """act[pair, n] = silu(x[tok] . Wg[e, n]) * (x[tok] . Wu[e, n]); N = I, K = H, weight rows [E, 2I, .]
    (STRIPES: stored stripe by stripe, gate and up rows paired)."""
    pdl_start(PDL)
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    blk, pn = pid // n_tiles, pid % n_tiles
    e, pair, row_ok = _block_rows(sorted_ptr, bexp_ptr, brows_ptr, ids_ptr, blk, BM, DIRECT)
    if e < 0:
        return
    offs_n = (pn * BN + tl.arange(0, BN)) % N  # wrapped: loads stay in bounds, the store masks
    offs_k = tl.arange(0, BK)
    g_base = w_ptr + e.to(tl.int64) * stride_we
    if STRIPES:  # both halves found by their rows in the expert's paired stripes
        u_base = g_base
        g_rows = paired_rows(offs_n, N)
        u_rows = paired_rows(offs_n + N, N)
    else:
        u_base = g_base + N * stride_wn
        g_rows = offs_n
        u_rows = offs_n
    gs_base = s_ptr + e.to(tl.int64) * stride_se
    if FMT == 2:  # fp8: the up rows' scales are found by absolute row (I + n) // SCALE_ROWS in the fused grid
        us_base = gs_base
        u_row0 = N
    else:
        us_base = gs_base + N * stride_sn
        u_row0 = 0
    gz_base = z_ptr + e.to(tl.int64) * stride_se
    uz_base = gz_base + N * stride_sn
    x_rows = x_ptr + (pair // TOPK).to(tl.int64) * stride_xt
    if SWAP:
        acc_g = tl.zeros([BN, BM], dtype=tl.float32)
    else:
        acc_g = tl.zeros([BM, BN], dtype=tl.float32)
    acc_u = tl.zeros_like(acc_g)
    for k0 in range(0, K, BK):
        a = _a_tile(x_rows, k0, offs_k, K, SWAP, EVEN_K)
        acc_g = _mma(
            a, g_base, gs_base, gz_base, offs_n, k0, offs_k, stride_wn, stride_sn, K, acc_g, 1.0,
            SWAP, FMT, HAS_ZERO, FAST_INT4, EVEN_K, PREC, EMU, FMT == 0 or not SWAP, BN, BK,
            0, SCALE_ROWS, SCALE_KSTEP, STRIPES, g_rows,
        )  # fmt: skip
        acc_u = _mma(
            a, u_base, us_base, uz_base, offs_n, k0, offs_k, stride_wn, stride_sn, K, acc_u, 1.0,
            SWAP, FMT, HAS_ZERO, FAST_INT4, EVEN_K, PREC, EMU, FMT == 0 or not SWAP, BN, BK,
            u_row0, SCALE_ROWS, SCALE_KSTEP, STRIPES, u_rows,
        )  # fmt: skip
    _store_rows(act_ptr, pair, row_ok, pn, N, stride_at, _silu_mul(acc_g, acc_u), SWAP, BN, EMU)


@triton.jit
def _down_kernel(
    act_ptr, w_ptr, s_ptr, z_ptr, tw_ptr, y_ptr, sorted_ptr, bexp_ptr, brows_ptr, ids_ptr,
    N, K, stride_at, stride_we, stride_wn, stride_se, stride_sn, stride_yt,
    DIRECT: tl.constexpr, SWAP: tl.constexpr, FMT: tl.constexpr, HAS_ZERO: tl.constexpr,
    FAST_INT4: tl.constexpr, EVEN_K: tl.constexpr, PREC: tl.constexpr, EMU: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    SCALE_ROWS: tl.constexpr, SCALE_KSTEP: tl.constexpr,
    PDL: tl.constexpr, STRIPES: tl.constexpr = False,
):  # fmt: skip
    """y[pair, n] = (act[pair] . Wd[e, n]) * top_w[pair]; N = H, K = I, weight rows [E, H, .]."""
    pdl_start(PDL)
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    blk, pn = pid // n_tiles, pid % n_tiles
    e, pair, row_ok = _block_rows(sorted_ptr, bexp_ptr, brows_ptr, ids_ptr, blk, BM, DIRECT)
    if e < 0:
        return
    offs_n = (pn * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    w_base = w_ptr + e.to(tl.int64) * stride_we
    s_base = s_ptr + e.to(tl.int64) * stride_se
    z_base = z_ptr + e.to(tl.int64) * stride_se
    a_rows = act_ptr + pair.to(tl.int64) * stride_at
    if SWAP:
        acc = tl.zeros([BN, BM], dtype=tl.float32)
    else:
        acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = _a_tile(a_rows, k0, offs_k, K, SWAP, EVEN_K)
        acc = _mma(
            a, w_base, s_base, z_base, offs_n, k0, offs_k, stride_wn, stride_sn, K, acc, 1.0,
            SWAP, FMT, HAS_ZERO, FAST_INT4, EVEN_K, PREC, EMU, FMT == 0 or not SWAP, BN, BK,
            0, SCALE_ROWS, SCALE_KSTEP, STRIPES, offs_n,
        )  # fmt: skip
    rw = tl.load(tw_ptr + pair).to(tl.float32)
    if SWAP:
        acc = acc * rw[None, :]
    else:
        acc = acc * rw[:, None]
    _store_rows(y_ptr, pair, row_ok, pn, N, stride_yt, acc, SWAP, BN, EMU)


@triton.jit
def _down_sum_kernel(
    act_ptr, w_ptr, s_ptr, z_ptr, tw_ptr, out_ptr, ids_ptr,
    N, K, stride_at, stride_we, stride_wn, stride_se, stride_sn,
    TOPK: tl.constexpr, FMT: tl.constexpr, HAS_ZERO: tl.constexpr, FAST_INT4: tl.constexpr,
    EVEN_K: tl.constexpr, PREC: tl.constexpr, EMU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    BK: tl.constexpr, STAGES: tl.constexpr,
    SCALE_ROWS: tl.constexpr, SCALE_KSTEP: tl.constexpr,
    PDL: tl.constexpr, STRIPES: tl.constexpr = False,
):  # fmt: skip
    """T == 1, tensor cores: out[n] = sum_s top_w[s] * (act[s] . Wd[ids[s], n]); program = n-block, one flat
    loop over (slot, k-step) so the next expert's loads are in flight while the current one finishes."""
    pdl_start(PDL)
    pn = tl.program_id(0)
    offs_n = (pn * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    kt = tl.cdiv(K, BK)
    acc = tl.zeros([BN, BM], dtype=tl.float32)
    for it in tl.range(0, TOPK * kt, num_stages=STAGES):
        s = it // kt
        k0 = (it - s * kt) * BK
        e = tl.load(ids_ptr + s).to(tl.int64)
        rw = tl.load(tw_ptr + s).to(tl.float32)
        a = _a_tile(act_ptr + s * stride_at + tl.zeros([BM], tl.int64), k0, offs_k, K, True, EVEN_K)
        acc = _mma(
            a, w_ptr + e * stride_we, s_ptr + e * stride_se, z_ptr + e * stride_se, offs_n, k0, offs_k,
            stride_wn, stride_sn, K, acc, rw, True, FMT, HAS_ZERO, FAST_INT4, EVEN_K, PREC, EMU, False, BN, BK,
            0, SCALE_ROWS, SCALE_KSTEP, STRIPES, offs_n,
        )  # fmt: skip
    # every column of acc holds the same token (the BM rows of `a` all point at act[s]); keep column 0
    col0 = tl.sum(tl.where(tl.arange(0, BM)[None, :] == 0, acc, 0.0), axis=1)
    nn = pn * BN + tl.arange(0, BN)
    tl.store(out_ptr + nn, cast(col0, out_ptr.dtype.element_ty, EMU), mask=nn < N)


@triton.jit
def _sum_slots_kernel(
    y_ptr, out_ptr, N, stride_ot,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BN: tl.constexpr, EMU: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """out[t, n] = sum_s y[t * k + s, n] in fp32 (y rows are dense: pair = t * k + s)."""
    pdl_start(PDL)
    t = tl.program_id(0).to(tl.int64)
    nn = tl.program_id(1) * BN + tl.arange(0, BN)
    s = tl.arange(0, TOPK_P)
    ptrs = y_ptr + (t * TOPK + s)[:, None] * N + nn[None, :]
    v = tl.load(ptrs, mask=(s < TOPK)[:, None] & (nn < N)[None, :], other=0.0).to(tl.float32)
    tl.store(
        out_ptr + t * stride_ot + nn, cast(tl.sum(v, axis=0), out_ptr.dtype.element_ty, EMU), mask=nn < N
    )


@triton.jit
def _gate_up_gemv_kernel(
    x_ptr, w_ptr, act_ptr, ids_ptr, N, K, stride_we, stride_wn,
    EVEN_K: tl.constexpr, EMU: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """T == 1, bf16: program (slot s, n-block); act[s, n] as in _gate_up_kernel, CUDA-core dot products."""
    pdl_start(PDL)
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    s, pn = pid // n_tiles, pid % n_tiles
    e = tl.load(ids_ptr + s)
    offs_n = (pn * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    g_rows = w_ptr + e.to(tl.int64) * stride_we + offs_n[:, None] * stride_wn
    u_rows = g_rows + N * stride_wn
    acc_g = tl.zeros([BN, BK], dtype=tl.float32)
    acc_u = tl.zeros([BN, BK], dtype=tl.float32)
    # tl.range with explicit stages: loads that feed no dot are not software-pipelined otherwise
    for k0 in tl.range(0, K, BK, num_stages=STAGES):
        xv = _load_k(x_ptr + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K).to(tl.float32)
        acc_g += _load_k(g_rows + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K).to(tl.float32) * xv
        acc_u += _load_k(u_rows + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K).to(tl.float32) * xv
    h = _silu_mul(tl.sum(acc_g, axis=1), tl.sum(acc_u, axis=1))
    nn = pn * BN + tl.arange(0, BN)
    tl.store(act_ptr + s * N + nn, cast(h, act_ptr.dtype.element_ty, EMU), mask=nn < N)


@triton.jit
def _down_sum_gemv_kernel(
    act_ptr, w_ptr, tw_ptr, ids_ptr, out_ptr, N, K, stride_we, stride_wn,
    TOPK: tl.constexpr, EVEN_K: tl.constexpr, EMU: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    STAGES: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """T == 1, bf16: out[n] = sum_s top_w[s] * (act[s] . Wd[ids[s], n]); one flat loop over (slot, k-step).
    The routing weight multiplies the fp32 activation, so it costs no extra rounding."""
    pdl_start(PDL)
    pn = tl.program_id(0)
    offs_n = (pn * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    kt = tl.cdiv(K, BK)
    acc = tl.zeros([BN, BK], dtype=tl.float32)
    for it in tl.range(0, TOPK * kt, num_stages=STAGES):
        s = it // kt
        k0 = (it - s * kt) * BK
        e = tl.load(ids_ptr + s)
        rw = tl.load(tw_ptr + s).to(tl.float32)
        av = _load_k(act_ptr + s * K + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K).to(tl.float32)
        w_rows = w_ptr + e.to(tl.int64) * stride_we + offs_n[:, None] * stride_wn
        acc += _load_k(w_rows + (k0 + offs_k)[None, :], k0, offs_k, K, 1, EVEN_K).to(tl.float32) * (av * rw)
    nn = pn * BN + tl.arange(0, BN)
    tl.store(out_ptr + nn, cast(tl.sum(acc, axis=1), out_ptr.dtype.element_ty, EMU), mask=nn < N)
