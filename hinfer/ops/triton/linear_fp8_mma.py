"""FP8 (e4m3) W8A16 skinny matmul on tensor cores, read straight from the row-major weight (Gluon; Fp8Weight's
CUDA decode at 1..64 rows).

y [M, N] = x [M, K] @ (W * scale)^T, W e4m3 [N, K] as stored (the prefill GEMMs read the same bytes), scale per
row (fp32 [N]) or per 128 x 128 block (fp32 [N/128, K/128]). Swap-AB as in linear_int4_mma: rows of W are the
MMA's M (mma.sync m16n8k16, bf16), rows of x its N (8, 16, 32 or 64, padded).

Loads: lane 4 g + t reads, for each 16-row stripe and 128-group, 16 bytes of rows g and g + 8 at K offsets
16 t .. 16 t + 15 and 64 + 16 t .. 64 + 16 t + 15 (a warp instruction: 8 rows x 64 contiguous bytes). The MMA's
reduction index need only be the same for W and x, so k' = 16 kt + 8 k3 + 2 t + k0 (k16 step kt, fragment column
2 t + k0 + 8 k3) reads K offset `real_k` = 64 (kt // 4) + 16 t + 4 (kt % 4) + 2 k0 + k3: a word's bytes
[b0 b1 b2 b3] (K offsets k .. k + 3) are the fragment pairs (b0, b2) (columns 2 t, 2 t + 1) and (b1, b3)
(columns 2 t + 8, 2 t + 9), which is the pairing Marlin's e4m3 -> bf16 trick produces: sign to bit 15, the 7
exponent-and-mantissa bits to bits 10-4, i.e. the value times 2^-120 (e4m3 subnormals land on bf16 subnormals),
then one exact bf16x2 multiply by 2^120 per register. x is read in the same K order: its words (x_k, x_k+1),
(x_k+2, x_k+3) become (x_k, x_k+2), (x_k+1, x_k+3) by one PRMT each.

Per-row scales multiply the fp32 accumulator once at the end; block scales each group's partial (as the int4
kernel's group scales). One program owns BLOCK_N rows (BLOCK_N / 16 / num_warps stripes per warp), a 1/SPLIT_K
slice of the groups and BLOCK_M rows of x; the weights DEPTH - 1 groups ahead in registers, no shared memory, no
barrier in the loop; split-K reduced in the same launch by the last program to arrive (linear_splitk's counters).
Reference twin: `emulate_fp8_mma` (torch, the same words, bit operations and K order).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from hinfer.ops.triton.common import GROUP as GROUP_K
from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_splitk import split_scratch
from hinfer.ops.triton.mma_common import (
    mma_layout,
    pdl_start,
    split_groups,
    store_y,
    tail_by_block,
    tail_by_row,
    tail_rows,
    x_stage,
)
from hinfer.ops.triton.tiles.forms import SkinnyConfig

GROUP = gl.constexpr(GROUP_K)
GW = gl.constexpr(GROUP_K // 4)  # a group of one row of W in int32 words
XW = gl.constexpr(GROUP_K // 2)  # a group of one row of x in int32 words (bf16 pairs)
MAX_M = 64
BIAS = 2.0**120  # e4m3 bits moved into bf16 by the trick below are the value times 2^-120

# One instance per word ($2, broadcast to its 4 elements as $2..$5): $0 = (b0, b2), $1 = (b1, b3) as bf16, each
# (q & 0x80008000) | ((q & 0x7f007f00) >> 4) on the word shifted so that the byte sits in the high byte of its
# half, then times 2^120 (bf16x2 0x7b80; the addend -0 keeps the product exact and its sign).
_E4M3 = gl.constexpr("""{
.reg .b32 q, m, sgn, low7, bias, nz;
mov.b32 sgn, 0x80008000;
mov.b32 low7, 0x7f007f00;
mov.b32 bias, 0x7b807b80;
mov.b32 nz, 0x80008000;
and.b32 m, $2, low7;
shr.b32 m, m, 4;
lop3.b32 $1, $2, sgn, m, 0xea;
shl.b32 q, $2, 8;
and.b32 m, q, low7;
shr.b32 m, m, 4;
lop3.b32 $0, q, sgn, m, 0xea;
fma.rn.bf16x2 $0, $0, bias, nz;
fma.rn.bf16x2 $1, $1, bias, nz;
}""")
_E4M3_ARGS = gl.constexpr("=r,=r" + ",r" * 4)
# x words (x_k, x_k+1), (x_k+2, x_k+3) -> (x_k, x_k+2), (x_k+1, x_k+3): the B fragment's pairs in real_k order
_X_PAIRS = gl.constexpr("prmt.b32 $0, $2, $3, 0x5410; prmt.b32 $1, $2, $3, 0x7632;")
# [S, r3, g, t, h, w, k3, k0] -> [S, r3, g, h, w, k3, t, k0] and [n, t, h, w, k3, k0] -> [h, w, k3, t, k0, n]
A_PERM = gl.constexpr((0, 1, 2, 4, 5, 6, 3, 7))
B_PERM = gl.constexpr((2, 3, 4, 1, 5, 0))


@gluon.constexpr_function
def _unpacked_layout(num_warps):
    # [stripe, r3 (rows g / g + 8), lane, h (K half of the group), w (word of 16 bytes), element]: a word's 4
    # values fastest, then its 16-byte run
    return gl.BlockedLayout([1, 1, 1, 2, 4, 4], [1, 1, 32, 1, 1, 1], [num_warps, 1, 1, 1, 1, 1], [5, 4, 3, 2, 1, 0])


@gluon.constexpr_function
def _words_layout(num_warps):
    return gl.SliceLayout(5, _unpacked_layout(num_warps))


@gluon.constexpr_function
def _x_pairs_layout(num_warps):
    # [row of x, t, h, word j, half]: lane 4 g + t holds row g's 32 values of the group at K offsets 64 h + 16 t ..;
    # every warp holds all of x (the B operand is shared by the warps' stripes)
    return gl.BlockedLayout([1, 1, 2, 8, 2], [8, 4, 1, 1, 1], [1, 1, 1, num_warps, 1], [4, 3, 2, 1, 0])


@gluon.constexpr_function
def _x_words_layout(num_warps):
    return gl.SliceLayout(4, _x_pairs_layout(num_warps))


@gluon.jit
def _iota5(SIZE: gl.constexpr, DIM: gl.constexpr, L: gl.constexpr):
    """arange(0, SIZE) along dim DIM of a rank-5 layout L (size 1 elsewhere)."""
    if DIM == 0:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
        r = i[:, None, None, None, None]
    elif DIM == 1:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
        r = i[None, :, None, None, None]
    elif DIM == 2:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, gl.SliceLayout(4, L)))))
        r = i[None, None, :, None, None]
    elif DIM == 3:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(4, L)))))
        r = i[None, None, None, :, None]
    else:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L)))))
        r = i[None, None, None, None, :]
    return r


@gluon.constexpr_function
def _x_stage_layout(num_warps):
    # [group, row, t, h, j]: 16 bytes a thread (four words j), a group's row of x (64 words) on 16 lanes
    return gl.BlockedLayout([1, 1, 1, 1, 4], [2, 1, 4, 2, 2], [num_warps, 1, 1, 1, 1], [4, 3, 2, 1, 0])


@gluon.jit
def x_stage_rows(XR: gl.constexpr):
    """arange(0, XR) in _x_stage_layout's row slice: the rows of x a program stages, to be mapped to x's rows."""
    L: gl.constexpr = _x_stage_layout(gl.num_warps())
    return gl.arange(0, XR, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, gl.SliceLayout(4, L)))))


@gluon.jit
def x_stage_ptrs(x_ptr, rows, stride_xm, g_lo, last, XG: gl.constexpr):
    """Pointers [XG, XR, t, h, j] (int32 words of bf16 pairs, _x_stage_layout) to groups g_lo .. g_lo + XG - 1 of
    x's rows `rows` ([XR], x_stage_rows' layout; stride_xm even), groups past `last` clamped to it (re-reads); a
    group's words in the x words layout's order (word 32 h + 8 t + j)."""
    L: gl.constexpr = _x_stage_layout(gl.num_warps())
    groups = gl.minimum(g_lo + _iota5(XG, 0, L), last)
    base = x_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    r = (rows.to(gl.int64) * (stride_xm // 2))[None, :, None, None, None]
    return base + r + groups * XW + _iota5(4, 2, L) * 8 + _iota5(2, 3, L) * 32 + _iota5(8, 4, L)


@gluon.jit
def _x_words(x, g, XS: gl.constexpr, BLOCK_M: gl.constexpr):
    """Group g of x as words [BLOCK_M, t, h, j]: loaded through x's pointers, or (XS) read from x_stage's buffer,
    its one staged row standing for all BLOCK_M where a program reads one row."""
    if XS:
        smem, g_lo = x
        v = smem.index(g - g_lo).load(_x_words_layout(gl.num_warps()))
        if v.shape[0] != BLOCK_M:  # the one staged row: a broadcast, the same registers
            v = v + gl.zeros([BLOCK_M, 4, 2, 8], gl.int32, layout=_x_words_layout(gl.num_warps()))
    else:
        v = gl.load(x + g * XW)
    return v


@gluon.jit
def _a_operand(words, BLOCK_N: gl.constexpr, DOT_A: gl.constexpr):
    """words int32 [S, 2, 32, 2, 4] -> the bf16 A operand [BLOCK_N, 128] in k' order, registers renamed only."""
    L6: gl.constexpr = _unpacked_layout(gl.num_warps())
    w4 = gl.expand_dims(words, 5) + gl.zeros([BLOCK_N // 16, 2, 32, 2, 4, 4], gl.int32, layout=L6)
    t = gl.inline_asm_elementwise(_E4M3, _E4M3_ARGS, [w4], dtype=gl.bfloat16, is_pure=True, pack=4)
    # element e = 2 k3 + k0 (register 0: k3 = 0), lane = 4 g + t
    t = gl.reshape(t, [BLOCK_N // 16, 2, 8, 4, 2, 4, 2, 2])  # [S, r3, g, t, h, w, k3, k0]
    t = gl.permute(t, A_PERM.value)  # [S, r3, g, h, w, k3, t, k0]
    t = gl.reshape(t, [BLOCK_N, GROUP])  # row 16 S + 8 r3 + g, k' = 16 (4 h + w) + 8 k3 + 2 t + k0
    return gl.convert_layout(t, DOT_A, assert_trivial=True)


@gluon.jit
def _b_operand(xw, BLOCK_M: gl.constexpr, DOT_B: gl.constexpr):
    """x words [BLOCK_M, 4 (t), 2 (h), 8 (j)] of one group -> the B operand [128 (k'), BLOCK_M], pairs rearranged
    by PRMT (word j = 2 w + k0 holds K offsets 64 h + 16 t + 4 w + 2 k0 + (0, 1))."""
    W: gl.constexpr = gl.num_warps()
    xp = gl.inline_asm_elementwise(_X_PAIRS, "=r,=r,r,r", [xw], dtype=gl.int32, is_pure=True, pack=2)
    x2 = gl.expand_dims(xp, 4) + gl.zeros([BLOCK_M, 4, 2, 8, 2], gl.int32, layout=_x_pairs_layout(W))
    xt = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r", [x2], dtype=gl.bfloat16, is_pure=True, pack=2)
    b = gl.reshape(xt, [BLOCK_M, 4, 2, 4, 2, 2])  # [n, t, h, w, k3, k0] (word 2 w + k3 after the PRMT)
    b = gl.permute(b, B_PERM.value)  # [h, w, k3, t, k0, n]
    b = gl.reshape(b, [GROUP, BLOCK_M])
    return gl.convert_layout(b, DOT_B, assert_trivial=True)


@gluon.jit
def _group(acc, words, x_ptrs, s_ptrs, g, scale, zero, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
           BLOCKED: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr, XS: gl.constexpr):  # fmt: skip
    """acc + group g's products: accumulated in the MMA (row scales, applied at the end) or, BLOCKED, the group's
    partial times its block scale (`scale`, loaded with the words). x: its pointers, or (XS) x_stage's buffer."""
    xb = _b_operand(_x_words(x_ptrs, g, XS, BLOCK_M), BLOCK_M, DOT_B)
    a = _a_operand(words, BLOCK_N, DOT_A)
    if BLOCKED:
        acc += mma_v2(a, xb, zero) * scale[:, None]
    else:
        acc = mma_v2(a, xb, acc)
    return acc


@gluon.jit
def _loads(w_ptrs, s_ptrs, g, BLOCKED: gl.constexpr):
    """Group g's words and (BLOCKED) its block scale per row; otherwise the scale pointers, as a placeholder (the
    row scales multiply the sum once, after the loop)."""
    words = gl.load(w_ptrs + g * GW)
    if BLOCKED:
        s = gl.load(s_ptrs + g)
    else:
        s = s_ptrs
    return words, s


@gluon.jit
def _k_loop(w_ptrs, s_ptrs, x_ptrs, g_lo, g_hi, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
            BLOCKED: gl.constexpr, DEPTH: gl.constexpr, PDL: gl.constexpr, XS: gl.constexpr = False):  # fmt: skip
    """acc [BLOCK_N, BLOCK_M] over groups g_lo .. g_hi - 1, the words DEPTH - 1 groups ahead in registers (the loop
    unrolled by DEPTH so that every look-ahead lands in free registers; a clamped look-ahead re-reads the last
    group, weighted 0). XS: x_ptrs are x_stage_ptrs', the groups of x staged in shared memory after the wait."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    last = gl.maximum(g_hi - 1, 0)
    w0, s0 = _loads(w_ptrs, s_ptrs, gl.minimum(g_lo, last), BLOCKED)
    if DEPTH == 2:
        pdl_start(PDL)  # the weights go ahead of the wait (nothing writes them); x is the previous kernel's output
        if XS:
            x_ptrs = x_stage(x_ptrs, g_lo)
        for g in range(g_lo, g_hi, 2):
            w1, s1 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 1, last), BLOCKED)
            acc = _group(acc, w0, x_ptrs, s_ptrs, g, s0, zero, BLOCK_N, BLOCK_M, BLOCKED, DOT_A, DOT_B, XS)
            w0, s0 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 2, last), BLOCKED)
            keep = (g + 1 < g_hi).to(gl.float32)
            if BLOCKED:
                acc = _group(acc, w1, x_ptrs, s_ptrs, gl.minimum(g + 1, last), s1 * keep, zero, BLOCK_N, BLOCK_M,
                             BLOCKED, DOT_A, DOT_B, XS)  # fmt: skip
            elif g + 1 < g_hi:
                acc = _group(acc, w1, x_ptrs, s_ptrs, g + 1, s1, zero, BLOCK_N, BLOCK_M, BLOCKED, DOT_A, DOT_B, XS)
    else:
        w1, s1 = _loads(w_ptrs, s_ptrs, gl.minimum(g_lo + 1, last), BLOCKED)
        w2, s2 = _loads(w_ptrs, s_ptrs, gl.minimum(g_lo + 2, last), BLOCKED)
        pdl_start(PDL)
        if XS:
            x_ptrs = x_stage(x_ptrs, g_lo)
        for g in range(g_lo, g_hi, 4):
            w3, s3 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 3, last), BLOCKED)
            acc = _group(acc, w0, x_ptrs, s_ptrs, g, s0, zero, BLOCK_N, BLOCK_M, BLOCKED, DOT_A, DOT_B, XS)
            w0, s0 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 4, last), BLOCKED)
            acc = _tail_group(acc, w1, x_ptrs, s_ptrs, g + 1, g_hi, last, s1, zero, BLOCK_N, BLOCK_M, BLOCKED,
                              DOT_A, DOT_B, XS)  # fmt: skip
            w1, s1 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 5, last), BLOCKED)
            acc = _tail_group(acc, w2, x_ptrs, s_ptrs, g + 2, g_hi, last, s2, zero, BLOCK_N, BLOCK_M, BLOCKED,
                              DOT_A, DOT_B, XS)  # fmt: skip
            w2, s2 = _loads(w_ptrs, s_ptrs, gl.minimum(g + 6, last), BLOCKED)
            acc = _tail_group(acc, w3, x_ptrs, s_ptrs, g + 3, g_hi, last, s3, zero, BLOCK_N, BLOCK_M, BLOCKED,
                              DOT_A, DOT_B, XS)  # fmt: skip
    return acc


@gluon.jit
def _tail_group(acc, words, x_ptrs, s_ptrs, g, g_hi, last, s, zero, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                BLOCKED: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr, XS: gl.constexpr):  # fmt: skip
    """_group for an unrolled iteration's later group, which may lie past g_hi (then weighted 0 or skipped)."""
    if BLOCKED:
        acc = _group(acc, words, x_ptrs, s_ptrs, gl.minimum(g, last), s * (g < g_hi).to(gl.float32), zero, BLOCK_N,
                     BLOCK_M, BLOCKED, DOT_A, DOT_B, XS)  # fmt: skip
    elif g < g_hi:
        acc = _group(acc, words, x_ptrs, s_ptrs, g, s, zero, BLOCK_N, BLOCK_M, BLOCKED, DOT_A, DOT_B, XS)
    return acc


@gluon.jit
def fp8_mma_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
    BLOCKED: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
    DEPTH: gl.constexpr, PDL: gl.constexpr = False, t_ptr=None, TAIL_N=0, stride_tn=0, TAIL: gl.constexpr = 0,
):  # fmt: skip
    """y[:, :N] = x @ (W * scale)^T and, with TAIL, y[:, N:N + TAIL_N] = x @ tail^T (bf16 rows on CUDA cores, the
    int4 kernel's tail_by_row (1) / tail_by_block (2)) in one launch. w_ptr: W's bytes as int32 words [N, K / 4];
    s_ptr: fp32 [N] or (BLOCKED) [N / 128, K / 128]."""
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    pid_k = gl.program_id(2)
    if TAIL > 0:  # programs past the N tiles compute the tail rows (a row per warp)
        if pid_n >= N // BLOCK_N:
            if pid_k == 0:
                row0 = (pid_n - N // BLOCK_N) * gl.num_warps()
                if TAIL == 1:
                    tail_by_row(x_ptr, t_ptr, y_ptr + N, row0, TAIL_N, M, pid_m * BLOCK_M, K, stride_xm, stride_ym,
                               stride_tn, BLOCK_M, PDL)  # fmt: skip
                else:
                    tail_by_block(x_ptr, t_ptr, y_ptr + N, row0, TAIL_N, M, pid_m * BLOCK_M, K, stride_xm, stride_ym,
                                stride_tn, BLOCK_M, PDL)  # fmt: skip
        else:
            _tile_program(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, pid_m, pid_n,
                          pid_k, BLOCKED, BLOCK_N, BLOCK_M, SPLIT_K, DEPTH, PDL)  # fmt: skip
    else:
        _tile_program(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, pid_m, pid_n,
                      pid_k, BLOCKED, BLOCK_N, BLOCK_M, SPLIT_K, DEPTH, PDL)  # fmt: skip


@gluon.jit
def _tile_program(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, pid_m, pid_n, pid_k,
                  BLOCKED: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
                  DEPTH: gl.constexpr, PDL: gl.constexpr):  # fmt: skip
    """One program of fp8_mma_kernel: BLOCK_N rows of W, BLOCK_M rows of x, its 1/SPLIT_K of the groups."""
    W: gl.constexpr = gl.num_warps()
    S: gl.constexpr = BLOCK_N // 16
    LW: gl.constexpr = _words_layout(W)
    MMA: gl.constexpr = mma_layout(W)
    n_groups = K // GROUP
    g_lo, g_hi = split_groups(K, SPLIT_K, pid_k)

    # [S, r3, lane, h, w]: row 16 stripe + 8 r3 + g, words 16 h + 4 t + w of the row's group (16 bytes a load)
    lane = _iota5(32, 2, LW)
    w_rows = (pid_n * S + _iota5(S, 0, LW)) * 16 + _iota5(2, 1, LW) * 8 + lane // 4
    w_ptrs = w_ptr + w_rows.to(gl.int64) * (K // 4) + _iota5(2, 3, LW) * 16 + (lane % 4) * 4 + _iota5(4, 4, LW)
    rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
    if BLOCKED:
        s_ptrs = s_ptr + (rows // 128) * n_groups
    else:
        s_ptrs = s_ptr + rows

    # x as words [BLOCK_M, t, h, j]: row g's words 32 h + 8 t + j of the group; rows past M re-read row M - 1
    LX: gl.constexpr = _x_words_layout(W)
    xn = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, LX))))
    xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, LX))))
    xh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, LX))))
    xj = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LX))))
    x_rows = gl.minimum(pid_m * BLOCK_M + xn, M - 1).to(gl.int64) * (stride_xm // 2)
    x_ptrs = (x_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + x_rows[:, None, None, None]
              + xt[None, :, None, None] * 8 + xh[None, None, :, None] * 32 + xj[None, None, None, :])  # fmt: skip

    acc = _k_loop(w_ptrs, s_ptrs, x_ptrs, g_lo, g_hi, BLOCK_N, BLOCK_M, BLOCKED, DEPTH, PDL)
    if not BLOCKED:
        acc = acc * gl.load(s_ptrs)[:, None]
    store_y(acc, rows, y_ptr, part_ptr, cnt_ptr, M, N, stride_ym, pid_m, pid_n, pid_k, BLOCK_N, BLOCK_M, SPLIT_K)


def fp8_mma_variant(block_n: int, block_m: int, split_k: int, warps: int, blocked: bool, depth: int = 2,
                    pdl: bool = False, tail: int = 0):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot)."""
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*fp32", "y_ptr": "*bf16", "part_ptr": "*fp32",
           "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_ym": "i32",
           "t_ptr": "*bf16", "TAIL_N": "i32", "stride_tn": "i32"}  # fmt: skip
    cex = dict(BLOCKED=blocked, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split_k, DEPTH=depth, PDL=pdl, TAIL=tail)
    name = (f"fp8 mma{' block' if blocked else ''} BLOCK_N={block_n} BLOCK_M={block_m} split {split_k} w{warps} "
            f"depth {depth}{' pdl' if pdl else ''}{f' tail {tail}' if tail else ''}")  # fmt: skip
    return name, fp8_mma_kernel, sig, cex, warps


def fp8_mma_fits(cfg: SkinnyConfig, m: int, n: int, k: int) -> bool:
    """Whether the kernel takes this tile at this shape."""
    return (m <= MAX_M and k % GROUP_K == 0 and n % cfg.block_n == 0 and cfg.block_n % (16 * cfg.num_warps) == 0
            and cfg.block_m in (8, 16, 32, 64) and cfg.num_stages in (2, 4))  # fmt: skip


def fp8_mma_matmul(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, blocked: bool, out: torch.Tensor | None = None,
    cfg: SkinnyConfig | None = None, tail: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, N] = x [M, K] @ (weight * scale)^T in bf16 for 1 <= M <= 64: weight e4m3 [N, K] row-major, scale fp32
    [N] or (blocked) [N / 128, K / 128]. `out` may be a column slice of a wider buffer (its row stride is
    honoured). `cfg`: the tile (hinfer.ops.triton.tiles.linear.fp8_mma_config's form). `tail` [T, K] bf16: rows
    computed in the same launch on CUDA cores into out[:, N:N + T] (`out` is then the whole [M, N + T] output,
    given)."""
    from hinfer.ops.triton.tiles.linear import fp8_mma_config

    m, k = x.shape
    n = weight.shape[0]
    if cfg is None:
        cfg = fp8_mma_config(max(m, 1), n, k)
    if (weight.shape[1] != k or x.dtype != torch.bfloat16 or weight.dtype != torch.float8_e4m3fn
            or not weight.is_contiguous() or not fp8_mma_fits(cfg, m, n, k)
            or (blocked and n % 128)):  # fmt: skip
        raise ValueError(f"fp8 mma: x [M <= {MAX_M}, K % {GROUP_K} == 0] bf16 and a contiguous e4m3 W [N, K] "
                         f"(N a multiple of the tile's {cfg.block_n}), got x {tuple(x.shape)} {x.dtype}, W "
                         f"{tuple(weight.shape)} {weight.dtype}")  # fmt: skip
    tail_n = tail_rows(tail, out, m, n, k)
    if x.stride(-1) != 1 or x.stride(0) % 2 or x.data_ptr() % 4:  # x's rows are read as bf16 pairs (int32)
        x = x.clone(memory_format=torch.contiguous_format)
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    assert out.shape == (m, n + tail_n) and out.stride(-1) == 1
    if m == 0:
        return out
    grid = (-(-m // cfg.block_m), n // cfg.block_n + -(-tail_n // cfg.num_warps), cfg.split_k)
    part, cnt = split_scratch(cfg.split_k, m, n, grid[0] * grid[1], x, out)
    fp8_mma_kernel[grid](
        x, weight.view(torch.int32), scale, out, part, cnt, m, n, k, x.stride(0), out.stride(0),
        BLOCKED=blocked, BLOCK_N=cfg.block_n, BLOCK_M=cfg.block_m, SPLIT_K=cfg.split_k, DEPTH=cfg.num_stages,
        t_ptr=x if tail is None else tail, TAIL_N=tail_n, stride_tn=0 if tail is None else tail.stride(0),
        TAIL=0 if tail is None else 2 if 1 < m and cfg.block_m <= 8 else 1,
        num_warps=cfg.num_warps, **pdl_kwargs(x, m),
    )  # fmt: skip
    return out


# ---- the torch twin: the same words, bit operations and K order ----


def real_k(kt: torch.Tensor, t: torch.Tensor, k3: torch.Tensor, k0: torch.Tensor) -> torch.Tensor:
    """K offset within a 128-group read by MMA index k' = 16 kt + 8 k3 + 2 t + k0."""
    return 64 * (kt // 4) + 16 * t + 4 * (kt % 4) + 2 * k0 + k3


def e4m3_pairs(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's conversion of int32 words [b0 b1 b2 b3] (int64 tensor of their unsigned values): the bf16 bit
    pairs (b0, b2) and (b1, b3), each int64 holding two 16-bit halves, before the multiply by 2^120."""
    sgn, low7 = 0x80008000, 0x7F007F00
    hi = (words & sgn) | ((words & low7) >> 4)
    q = (words << 8) & 0xFFFFFFFF
    lo = (q & sgn) | ((q & low7) >> 4)
    return lo, hi


def _halves(pairs: torch.Tensor) -> torch.Tensor:
    """int64 [...] of two bf16 halves -> float32 [..., 2] (low half first)."""
    h = torch.stack([pairs & 0xFFFF, pairs >> 16], dim=-1).to(torch.int16)
    return h.view(torch.bfloat16).float()


def dequantize_words(weight: torch.Tensor) -> torch.Tensor:
    """e4m3 [N, K] -> fp32 [N, K] the way the kernel turns its bytes into MMA operands (bits, then times 2^120),
    in the original K order."""
    n, k = weight.shape
    words = weight.contiguous().view(torch.int32).long() & 0xFFFFFFFF  # [N, K / 4]
    lo, hi = e4m3_pairs(words)
    v = torch.stack([_halves(lo), _halves(hi)], dim=-2)  # [N, K/4, pair (lo, hi), half]: (b0, b2), (b1, b3)
    # byte j = 2 k0 + k3 sits in pair k3, half k0
    return (v.transpose(-1, -2).reshape(n, k) * BIAS).float()


def emulate_fp8_mma(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, blocked: bool) -> torch.Tensor:
    """fp32 [M, N] of what the kernel sums before rounding to bf16: each 128-group's products in the MMA's k'
    order (W from the kernel's bit conversion, x permuted alike), per-row scales at the end or block scales per
    group."""
    m, k = x.shape
    n = weight.shape[0]
    wv = dequantize_words(weight).view(n, k // GROUP_K, GROUP_K)
    kt, k3, t, k0 = torch.meshgrid(torch.arange(8), torch.arange(2), torch.arange(4), torch.arange(2), indexing="ij")
    order = real_k(kt, t, k3, k0).reshape(-1)  # k' = 16 kt + 8 k3 + 2 t + k0 -> its K offset
    wk = wv[:, :, order]
    xk = x.float().view(m, k // GROUP_K, GROUP_K)[:, :, order]
    parts = torch.einsum("mgk,ngk->gmn", xk, wk)  # [G, M, N]
    if blocked:
        s = scale.float().repeat_interleave(128, dim=0)[:n].t()  # [K / 128, N]
        return (parts * s[:, None, :]).sum(0)
    return parts.sum(0) * scale.float()[None, :]
