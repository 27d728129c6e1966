"""INT4 W4A16 skinny matmul on tensor cores from fragment-ordered weights (Gluon; Int4MmaWeight's CUDA decode).

y [M, N] = x [M, K] @ W^T for M = 1..64, W in hinfer.quant.int4_mma_layout order. Swap-AB: rows of W are the
MMA's M (mma.sync m16n8k16, A = W), the rows of x its N (8, 16, 32 or 64, padded). Each thread loads its words with
128-bit loads in a blocked layout whose registers are, word for word, A fragments: Marlin's bf16 trick (per word
3 shifts and 4 lop3) yields the 4 bf16x2 registers of one fragment holding 128 + u, and the reshape / permute
below only rename registers, which `convert_layout(..., assert_trivial=True)` proves at compile time. No barrier
in the loop, the weights in registers (the ring tiles stream the words through shared memory instead: _k_loop_ring).
x is read the same way as operand B, as int32 words of bf16 pairs (32 contiguous K offsets per lane and group,
the K order of int4_mma_layout.real_k).

The offset 128 + z comes off each group's fp32 partial: sum (128 + u) x - (128 + z) sum x, with sum x from a
second MMA against a constant ones operand (the same for every stripe, so emitted once per k16 step);
OFFSET_MMA=False instead subtracts it per weight register with one exact bf16x2 fma before the MMA.

One program owns BLOCK_N rows (BLOCK_N / 16 / num_warps stripes of 16 per warp), a 1/SPLIT_K slice of the
128-groups and BLOCK_M rows of x (more rows take more programs, which re-read the tile from L2); the group's
partial [BLOCK_N, BLOCK_M] is multiplied by the group's scales (as the Triton stream kernel does). Words, scales
and zeros are loaded DEPTH - 1 groups ahead into registers (the loop unrolled by DEPTH); x (small,
cache-resident) in the step, or, staged (x_stage: the default where a program reads one row of x), all of the
program's groups of x read into shared memory once after the PDL wait, each group's then read from there. A tile's max_regs caps the registers (launch option maxnreg). Split-K is reduced in the same launch by the last program to arrive (same scheme and counters as
hinfer.ops.triton.linear_splitk). Reference twin:
hinfer.quant.int4_mma_layout.emulate_kernel.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Protocol

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

from hinfer.ops.triton.common import GROUP as GROUP_K  # quantization group along K
from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_splitk import split_scratch
from hinfer.ops.triton.mma_common import (
    PROBE_LAST,
    flat_smem,
    iota4,
    mma_layout,
    pdl_start,
    probe_stamp,
    store_y,
    tail_by_block,
    tail_by_row,
    tail_rows,
    vec16_layout,
    x_stage,
)
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.linear import mma_config

GROUP = gl.constexpr(GROUP_K)
XW = gl.constexpr(GROUP_K // 2)  # a group of x in bf16 pairs (the kernels read x as int32 words)
MAX_M = 64  # rows of x per call (the MMA's N, padded to 8, 16, 32 or 64)

# One asm instance per word (pack=8: the word broadcast to its 8 fragment elements arrives as $4..$11, the
# outputs are 4 bf16x2 registers): $j = lop3(word >> 4j, 0x000f000f, 0x43004300) holds nibble positions j and
# j + 4 as bf16 128 + u, i.e. fragment register j = (a_2j, a_2j+1). _UNPACK then subtracts 128 + z with one
# exact bf16x2 fma: rows g ($12, registers 0 and 2), rows g + 8 ($20, registers 1 and 3).
_NIBBLES = """
lop3.b32 $0, $4, msk, mag, 0xea;
shr.u32 sh, $4, 4;
lop3.b32 $1, sh, msk, mag, 0xea;
shr.u32 sh, $4, 8;
lop3.b32 $2, sh, msk, mag, 0xea;
shr.u32 sh, $4, 12;
lop3.b32 $3, sh, msk, mag, 0xea;
"""
_UNPACK = gl.constexpr("""{
.reg .b32 sh, msk, mag, one;
mov.b32 msk, 0x000f000f;
mov.b32 mag, 0x43004300;
mov.b32 one, 0x3f803f80;""" + _NIBBLES + """fma.rn.bf16x2 $0, $0, one, $12;
fma.rn.bf16x2 $1, $1, one, $20;
fma.rn.bf16x2 $2, $2, one, $12;
fma.rn.bf16x2 $3, $3, one, $20;
}""")
_UNPACK_RAW = gl.constexpr("""{
.reg .b32 sh, msk, mag;
mov.b32 msk, 0x000f000f;
mov.b32 mag, 0x43004300;""" + _NIBBLES + "}")
# [S, kc, g, t, kq, k3, r3, k0] -> [S, r3, g, kc, kq, k3, t, k0] and [n, t, kt, k3, k0] -> [kt, k3, t, k0, n]
# (tests/quant/test_int4_mma_layout.py replays both on index arrays against int4_mma_layout)
A_PERM = gl.constexpr((0, 6, 2, 1, 4, 5, 3, 7))
# rows (ROWS, hinfer.quant.int4's own layout): [S, r3, g, t, w, j1, k3, k0] -> [S, r3, g, w, j1, k3, t, k0]
A_PERM_ROWS = gl.constexpr((0, 1, 2, 4, 5, 6, 3, 7))
B_PERM = gl.constexpr((2, 3, 1, 4, 0))
# _UNPACK, then each register times its row's scale (rows g: $28, g + 8: $36), rounded once (fma with -0): the
# A operand round((u - z) * s), Int4MmaWeight.dequantize's bf16 value (the warpgroup-MMA kernel's)
_UNPACK_SCALED = gl.constexpr(_UNPACK.value[:-1] + """{
.reg .b32 nz;
mov.b32 nz, 0x80008000;
fma.rn.bf16x2 $0, $0, $28, nz;
fma.rn.bf16x2 $1, $1, $36, nz;
fma.rn.bf16x2 $2, $2, $28, nz;
fma.rn.bf16x2 $3, $3, $36, nz;
}
}""")
_RAW_ARGS = gl.constexpr("=r,=r,=r,=r" + ",r" * 8)  # 4 bf16x2 outputs, the word 8 times
_ARGS = gl.constexpr("=r,=r,=r,=r" + ",r" * 24)  # and the two offsets 8 times each
_SCALED_ARGS = gl.constexpr("=r,=r,=r,=r" + ",r" * 40)  # and the two scales 8 times each
_SYM_OFFSET = gl.constexpr(-0x3CF73CF8)  # bf16x2 (-136, -136) = 0xc308c308 as int32


@gluon.constexpr_function
def unpacked_layout(num_warps):
    # [stripe, k64 chunk, lane, k16 step, fragment element]: the 8 elements of a word fastest, then 4 words
    return gl.BlockedLayout([1, 1, 1, 4, 8], [1, 1, 32, 1, 1], [num_warps, 1, 1, 1, 1], [4, 3, 2, 1, 0])


@gluon.constexpr_function
def words_layout(num_warps):
    # [stripe, k64 chunk, lane, k16 step]: 4 consecutive words per thread (16 bytes), lane = 4 g + t
    return gl.SliceLayout(4, unpacked_layout(num_warps))


@gluon.constexpr_function
def _x_pairs_layout(num_warps):
    # [row of x, t, 16 pairs, 2]: lane 4 g + t holds rows g (and g + 8 in a register) and its 32 contiguous K
    # offsets of the group (int4_mma_layout.real_k); every warp holds all of x (the B operand is shared)
    return gl.BlockedLayout([1, 1, 16, 2], [8, 4, 1, 1], [1, 1, num_warps, 1], [3, 2, 1, 0])


@gluon.constexpr_function
def x_words_layout(num_warps):
    # x read as int32 words (bf16 pairs), so that each register reaches the B operand whole (as bf16, LLVM splits
    # x into halves and repacks them, a PRMT each)
    return gl.SliceLayout(3, _x_pairs_layout(num_warps))


@gluon.jit
def neg_offset(z_ptrs, HAS_ZERO: gl.constexpr):
    """bf16x2 bits of -(128 + z), both halves (int32); z = 8 when symmetric."""
    if HAS_ZERO:
        v = gl.load(z_ptrs).to(gl.int32) | 0xC300
        r = (v << 16) | v
    else:
        r = gl.full(z_ptrs.shape, _SYM_OFFSET, gl.int32, layout=z_ptrs.type.layout)
    return r


@gluon.jit
def _step_loads(w_ptrs, s_ptrs, z_lo, z_rows, g, sg, HAS_ZERO: gl.constexpr, OFFSET_MMA: gl.constexpr,
                GW: gl.constexpr):  # fmt: skip
    """What group g reads from the weight: 16 bytes of words per thread per stripe and k64 chunk, the scales,
    and the offset terms: OFFSET_MMA: 128 + z per row (twice, to keep one signature); otherwise the
    negated bf16x2 offsets -(128 + z) of rows g and g + 8 of each stripe, in the words' layout."""
    words = gl.load(w_ptrs + g * GW)
    s = gl.load(s_ptrs + g * sg).to(gl.float32)
    if OFFSET_MMA:
        if HAS_ZERO:
            c = gl.load(z_rows + g * sg).to(gl.float32) + 128.0
        else:
            c = gl.full(s.shape, 136.0, gl.float32, layout=s.type.layout)
        return words, s, c, c
    else:
        off_lo = neg_offset(z_lo + g * sg, HAS_ZERO)
        off_hi = neg_offset(z_lo + g * sg + 8, HAS_ZERO)  # fragment order only: scales are [G, N] there
        return words, s, off_lo, off_hi


@gluon.jit
def a_operand(words, off_lo, off_hi, BLOCK_N: gl.constexpr, DOT_A: gl.constexpr, OFFSET_MMA: gl.constexpr,
               ROWS: gl.constexpr, SCALED: gl.constexpr = False, sc_lo=0, sc_hi=0):  # fmt: skip
    """words int32 [S, 2, 32, 4] -> the bf16 A operand [BLOCK_N, 128] (u - z, or 128 + u with OFFSET_MMA, or
    round((u - z) s) with SCALED: sc_lo / sc_hi the bf16x2 scales of rows g / g + 8), registers renamed only."""
    # the unpacked layout holds a word's 8 fragment elements in consecutive registers: pack=8 hands them to one
    # asm instance (and LLVM keeps the bf16x2 registers whole, no 16-bit split and repack)
    L5: gl.constexpr = unpacked_layout(gl.num_warps())
    w8 = gl.expand_dims(words, 4) + gl.zeros([BLOCK_N // 16, 2, 32, 4, 8], gl.int32, layout=L5)
    if OFFSET_MMA:
        t = gl.inline_asm_elementwise(_UNPACK_RAW, _RAW_ARGS, [w8], dtype=gl.bfloat16, is_pure=True, pack=8)
    else:
        if SCALED:
            t = gl.inline_asm_elementwise(
                _UNPACK_SCALED, _SCALED_ARGS, [w8, gl.expand_dims(off_lo, 4), gl.expand_dims(off_hi, 4),
                                               gl.expand_dims(sc_lo, 4), gl.expand_dims(sc_hi, 4)],
                dtype=gl.bfloat16, is_pure=True, pack=8,
            )  # fmt: skip
        else:
            t = gl.inline_asm_elementwise(
                _UNPACK, _ARGS, [w8, gl.expand_dims(off_lo, 4), gl.expand_dims(off_hi, 4)],
                dtype=gl.bfloat16, is_pure=True, pack=8,
            )  # fmt: skip
    if ROWS:
        # t: [S, r3, lane, w, e]: word w of row 16 S + 8 r3 + g holds K offsets 32 t + 8 w + e of the group, and
        # register j of the unpack is the pair (2 j, 2 j + 1) (hinfer.quant.int4.POS), so e = 4 j1 + 2 k3 + k0
        # with k16 step kt = 2 w + j1: K = 32 t + 4 kt + 2 k3 + k0, the same K order as fragment order's
        t = gl.reshape(t, [BLOCK_N // 16, 2, 8, 4, 4, 2, 2, 2])  # lane -> (g, t), e -> (j1, k3, k0)
        t = gl.permute(t, A_PERM_ROWS.value)  # [S, r3, g, w, j1, k3, t, k0]
    else:
        # t: [S, kc, lane, kq, e] with fragment element e = 4 k3 + 2 r3 + k0 (bit0 k + 1, bit1 row + 8, bit2 k + 8)
        t = gl.reshape(t, [BLOCK_N // 16, 2, 8, 4, 4, 2, 2, 2])  # lane -> (g, t), e -> (k3, r3, k0)
        t = gl.permute(t, A_PERM.value)  # [S, r3, g, kc, kq, k3, t, k0]
    t = gl.reshape(t, [BLOCK_N, GROUP])  # row = 16 S + 8 r3 + g, k = 16 kt + 8 k3 + 2 t + k0
    return gl.convert_layout(t, DOT_A, assert_trivial=True)


@gluon.jit
def _b_operand(xw, BLOCK_M: gl.constexpr, DOT_B: gl.constexpr):
    """x [BLOCK_M, 4 (t), 16] of one group, in bf16 pairs (int32) -> the B operand [128 (k'), BLOCK_M], registers
    renamed only: offset 32 t + j with j = 4 kt + 2 k3 + k0 is the MMA's k' = 16 kt + 8 k3 + 2 t + k0."""
    x2 = gl.expand_dims(xw, 3) + gl.zeros([BLOCK_M, 4, 16, 2], gl.int32, layout=_x_pairs_layout(gl.num_warps()))
    xt = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r", [x2], dtype=gl.bfloat16, is_pure=True, pack=2)
    b = gl.reshape(xt, [BLOCK_M, 4, 8, 2, 2])  # [n, t, kt, k3, k0]
    b = gl.permute(b, B_PERM.value)  # [kt, k3, t, k0, n]
    b = gl.reshape(b, [GROUP, BLOCK_M])
    return gl.convert_layout(b, DOT_B, assert_trivial=True)


@gluon.jit
def x_word_ptrs(x_ptr, rows, stride_xm, BLOCK_M: gl.constexpr):
    """Pointers to group 0 of x's rows `rows` ([BLOCK_M] int, in x_words_layout's row slice; stride_xm even) as
    bf16 pairs: [BLOCK_M, 4, 16] int32, thread (g, t) at row g's 32 K offsets 32 t .. 32 t + 31 (+ g * XW)."""
    LX: gl.constexpr = x_words_layout(gl.num_warps())
    xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, LX)))[None, :, None]
    xj = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, LX)))[None, None, :]
    base = x_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    return base + (rows.to(gl.int64) * (stride_xm // 2))[:, None, None] + xt * 16 + xj


@gluon.constexpr_function
def x_stage_layout(num_warps):
    # [group, row, t, 16 words]: 16 bytes a thread, a group's row of x (256 bytes) on 16 lanes
    return gl.BlockedLayout([1, 1, 1, 4], [2, 1, 4, 4], [num_warps, 1, 1, 1], [3, 2, 1, 0])


@gluon.jit
def x_stage_rows(XR: gl.constexpr):
    """arange(0, XR) in x_stage_layout's row slice: the rows of x a program stages, to be mapped to x's rows."""
    L: gl.constexpr = x_stage_layout(gl.num_warps())
    return gl.arange(0, XR, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, L))))


@gluon.jit
def x_stage_ptrs(x_ptr, rows, stride_xm, g_lo, last, XG: gl.constexpr):
    """Pointers [XG, XR, 4, 16] (int32 words of bf16 pairs, x_stage_layout) to groups g_lo .. g_lo + XG - 1 of x's
    rows `rows` ([XR], x_stage_rows' layout; stride_xm even), groups past `last` clamped to it (re-reads)."""
    L: gl.constexpr = x_stage_layout(gl.num_warps())
    groups = gl.minimum(g_lo + iota4(XG, 0, L), last)
    base = x_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    r = (rows.to(gl.int64) * (stride_xm // 2))[None, :, None, None]
    return base + r + groups * XW + iota4(4, 2, L) * 16 + iota4(16, 3, L)


@gluon.jit
def _x_at(x, g, XA: gl.constexpr, XS: gl.constexpr = False, BLOCK_M: gl.constexpr = 8):
    """Group g of x: x's pointers loaded here, (XA) the values loaded ahead, or (XS) read from x_stage's buffer:
    its staged rows, or its one row standing for all BLOCK_M (a one-row launch, whose padding rows repeat it)."""
    if XS:
        smem, g_lo = x
        v = smem.index(g - g_lo).load(x_words_layout(gl.num_warps()))
        if v.shape[0] != BLOCK_M:  # the one staged row: a broadcast, the same registers
            v = v + gl.zeros([BLOCK_M, 4, 16], gl.int32, layout=x_words_layout(gl.num_warps()))
    elif XA:
        v = x
    else:
        v = gl.load(x + g * XW)
    return v


@gluon.jit
def _x_ahead(x_ptrs, g, XA: gl.constexpr):
    """With XA group g of x loaded now (it travels with the look-ahead's weights), else the pointers."""
    if XA:
        v = gl.load(x_ptrs + g * XW)
    else:
        v = x_ptrs
    return v


@gluon.jit
def group_partial(acc, words, s, off_lo, off_hi, x, g, zero, ones, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
           DOT_A: gl.constexpr, DOT_B: gl.constexpr, OFFSET_MMA: gl.constexpr, ROWS: gl.constexpr,
           XA: gl.constexpr = False, XS: gl.constexpr = False):  # fmt: skip
    """acc + group g's scaled partial. x: its pointers (small and cache-resident: loaded here, not carried), with
    XA the group's x itself, loaded ahead with the weights, or with XS x_stage's (buffer, g_lo)."""
    xb = _b_operand(_x_at(x, g, XA, XS, BLOCK_M), BLOCK_M, DOT_B)
    part = mma_v2(a_operand(words, off_lo, off_hi, BLOCK_N, DOT_A, OFFSET_MMA, ROWS), xb, zero)
    if OFFSET_MMA:  # (sum (128 + u) x - (128 + z) sum x) s, in fp32 (off_lo holds 128 + z)
        acc += (part - off_lo[:, None] * mma_v2(ones, xb, zero)) * s[:, None]
    else:
        acc += part * s[:, None]
    return acc


@gluon.jit
def loop_terms(BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, OFFSET_MMA: gl.constexpr):
    """A k-loop's starting terms: the zeroed accumulator, the zero addend of each group's MMA and, with
    OFFSET_MMA, the ones A operand (every row of mma(ones, x) is the group's sum of x: identical MMAs, emitted
    once; a placeholder otherwise)."""
    MMA: gl.constexpr = mma_layout(gl.num_warps())
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    ones = zero
    if OFFSET_MMA:
        ones = gl.full([BLOCK_N, GROUP], 1.0, gl.bfloat16, layout=DOT_A)
    return acc, zero, ones


@gluon.jit
def k_loop(wp, sp, zl, zr, sg, x_ptrs, g_lo, g_hi, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
            HAS_ZERO: gl.constexpr, OFFSET_MMA: gl.constexpr, DEPTH: gl.constexpr, ROWS: gl.constexpr,
            GW: gl.constexpr, PDL: gl.constexpr, XA: gl.constexpr = False, XS: gl.constexpr = False):  # fmt: skip
    """acc [BLOCK_N, BLOCK_M] over groups g_lo .. g_hi - 1: the stripes' words from wp (+ g * GW), scales sp and
    zero points zl / zr (+ g * sg), x from x_ptrs (+ g * 128; XA: loaded with the look-ahead's weights, so its
    latency is off each group's path, at 16 more registers a group in flight; XS: x_ptrs are x_stage_ptrs', the
    program's groups of x read once into shared memory after the PDL wait)."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    acc, zero, ones = loop_terms(BLOCK_N, BLOCK_M, OFFSET_MMA)
    last = gl.maximum(g_hi - 1, 0)  # loads stay in bounds even for an empty split
    # unrolled by DEPTH so that each look-ahead load lands in registers that are free (no copies at the back
    # edge): DEPTH - 1 groups in flight; a clamped look-ahead re-reads the last group (a cache hit) instead of
    # branching, and a count that is not a multiple of DEPTH ends on such re-reads weighted 0
    w0, s0, lo0, hi0 = _step_loads(wp, sp, zl, zr, gl.minimum(g_lo, last), sg, HAS_ZERO,
                                        OFFSET_MMA, GW)  # fmt: skip
    # the weights go ahead of the PDL wait (nothing writes them); x is the previous kernel's output: after it
    if DEPTH == 2:
        pdl_start(PDL)
        if XS:
            x_ptrs = x_stage(x_ptrs, g_lo)
        x0 = _x_ahead(x_ptrs, gl.minimum(g_lo, last), XA)
        for g in range(g_lo, g_hi, 2):
            w1, s1, lo1, hi1 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 1, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x1 = _x_ahead(x_ptrs, gl.minimum(g + 1, last), XA)
            acc = group_partial(acc, w0, s0, lo0, hi0, x0, g, zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B,
                         OFFSET_MMA, ROWS, XA, XS)  # fmt: skip
            w0, s0, lo0, hi0 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 2, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x0 = _x_ahead(x_ptrs, gl.minimum(g + 2, last), XA)
            acc = group_partial(acc, w1, s1 * (g + 1 < g_hi).to(gl.float32), lo1, hi1, x1,
                         gl.minimum(g + 1, last), zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, OFFSET_MMA,
                         ROWS, XA, XS)  # fmt: skip
    else:
        w1, s1, lo1, hi1 = _step_loads(wp, sp, zl, zr, gl.minimum(g_lo + 1, last), sg, HAS_ZERO,
                                            OFFSET_MMA, GW)  # fmt: skip
        w2, s2, lo2, hi2 = _step_loads(wp, sp, zl, zr, gl.minimum(g_lo + 2, last), sg, HAS_ZERO,
                                            OFFSET_MMA, GW)  # fmt: skip
        pdl_start(PDL)
        if XS:
            x_ptrs = x_stage(x_ptrs, g_lo)
        x0 = _x_ahead(x_ptrs, gl.minimum(g_lo, last), XA)
        x1 = _x_ahead(x_ptrs, gl.minimum(g_lo + 1, last), XA)
        x2 = _x_ahead(x_ptrs, gl.minimum(g_lo + 2, last), XA)
        for g in range(g_lo, g_hi, 4):
            w3, s3, lo3, hi3 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 3, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x3 = _x_ahead(x_ptrs, gl.minimum(g + 3, last), XA)
            acc = group_partial(acc, w0, s0, lo0, hi0, x0, g, zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B,
                         OFFSET_MMA, ROWS, XA, XS)  # fmt: skip
            w0, s0, lo0, hi0 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 4, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x0 = _x_ahead(x_ptrs, gl.minimum(g + 4, last), XA)
            acc = group_partial(acc, w1, s1 * (g + 1 < g_hi).to(gl.float32), lo1, hi1, x1,
                         gl.minimum(g + 1, last), zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, OFFSET_MMA,
                         ROWS, XA, XS)  # fmt: skip
            w1, s1, lo1, hi1 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 5, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x1 = _x_ahead(x_ptrs, gl.minimum(g + 5, last), XA)
            acc = group_partial(acc, w2, s2 * (g + 2 < g_hi).to(gl.float32), lo2, hi2, x2,
                         gl.minimum(g + 2, last), zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, OFFSET_MMA,
                         ROWS, XA, XS)  # fmt: skip
            w2, s2, lo2, hi2 = _step_loads(wp, sp, zl, zr, gl.minimum(g + 6, last), sg, HAS_ZERO,
                                                OFFSET_MMA, GW)  # fmt: skip
            x2 = _x_ahead(x_ptrs, gl.minimum(g + 6, last), XA)
            acc = group_partial(acc, w3, s3 * (g + 3 < g_hi).to(gl.float32), lo3, hi3, x3,
                         gl.minimum(g + 3, last), zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, OFFSET_MMA,
                         ROWS, XA, XS)  # fmt: skip
    return acc


@gluon.jit
def ring_issue(bufs, w_ptrs, s_ptrs, z_ptrs, g, last, sg, turn, RING: gl.constexpr, HAS_ZERO: gl.constexpr,
                GW: gl.constexpr):  # fmt: skip
    """cp.async groups g, g + 1, .. (one per buffer set in `bufs`; clamped to `last`: re-reads, never used) into
    slot turn % RING: words, scales (and zeros); one commit group."""
    for h in gl.static_range(len(bufs)):
        w_smem, s_smem, z_smem = bufs[h]
        i = turn % RING
        gh = gl.minimum(g + h, last)
        async_copy.async_copy_global_to_shared(w_smem.index(i), w_ptrs + gh * GW)
        async_copy.async_copy_global_to_shared(s_smem.index(i), s_ptrs + gh * sg)
        if HAS_ZERO:
            async_copy.async_copy_global_to_shared(z_smem.index(i), z_ptrs + gh * sg)
    async_copy.commit_group()


@gluon.jit
def ring_turn(bufs, wp, s_ptrs, z_ptrs, sg, turn, g_lo, last, RING: gl.constexpr, HAS_ZERO: gl.constexpr,
               GW: gl.constexpr):  # fmt: skip
    """Wait for slot turn % RING, then refill the slot read one turn ago with turn + RING - 1's groups."""
    async_copy.wait_group(RING - 2)  # this thread's copies of this turn's groups have landed
    gl.thread_barrier()  # and every thread's (scales), and slot (turn - 1) % RING is read by all
    nxt = turn + RING - 1
    ring_issue(bufs, wp, s_ptrs, z_ptrs, g_lo + nxt * len(bufs), last, sg, nxt, RING, HAS_ZERO, GW)


@gluon.jit
def _slot_group(acc, buf, i, x, g, zero, ones, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                HAS_ZERO: gl.constexpr, XA: gl.constexpr, XS: gl.constexpr = False):  # fmt: skip
    """acc + the partial of group g, read from slot i of the buffer set `buf` (words, scales, zeros)."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    SL: gl.constexpr = gl.SliceLayout(1, MMA)
    w_smem, s_smem, z_smem = buf
    words = w_smem.index(i).load(words_layout(W))
    s = s_smem.index(i).load(SL).to(gl.float32)
    if HAS_ZERO:
        c = z_smem.index(i).load(SL).to(gl.float32) + 128.0
    else:
        c = gl.full([BLOCK_N], 136.0, gl.float32, layout=SL)
    return group_partial(acc, words, s, c, c, x, g, zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, True, False, XA, XS)


@gluon.jit
def ring_buffers(RING: gl.constexpr, BLOCK_N: gl.constexpr, HAS_ZERO: gl.constexpr):
    """One ring's shared memory: words [RING, S, 2, 32, 4], scales and zeros [RING, BLOCK_N]."""
    w_smem = gl.allocate_shared_memory(gl.int32, [RING, BLOCK_N // 16, 2, 32, 4], flat_smem(4))
    s_smem = gl.allocate_shared_memory(gl.bfloat16, [RING, BLOCK_N], flat_smem(1))
    z_smem = s_smem
    if HAS_ZERO:
        z_smem = gl.allocate_shared_memory(gl.uint8, [RING, BLOCK_N], flat_smem(1))
    return w_smem, s_smem, z_smem


@gluon.jit
def _k_loop_ring(wp, s_base, z_base, sg, x_ptrs, g_lo, g_hi, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                 HAS_ZERO: gl.constexpr, RING: gl.constexpr, GW: gl.constexpr, PDL: gl.constexpr,
                 XA: gl.constexpr = False, PAIR: gl.constexpr = 1, XS: gl.constexpr = False):  # fmt: skip
    """k_loop with the weights streamed through a shared-memory ring of RING slots of PAIR groups (cp.async):
    RING - 1 slots in flight per program without holding them in registers (XA: x one group ahead, in
    registers, the loop unrolled by two; PAIR = 2 needs it). Each thread copies, and later reads, its own 16
    bytes of words; the scales / zeros rows are copied by a few threads and read by all, hence one barrier a slot
    (which also keeps a slot from being refilled before every thread has read it). With PAIR = 2 the slot's
    second group has buffers of its own, so the compiler adds no barrier between the two groups' copies:
    half the barriers. Fragment order, the offset taken off by the ones MMA."""
    W: gl.constexpr = gl.num_warps()
    b0 = ring_buffers(RING, BLOCK_N, HAS_ZERO)
    if PAIR == 2:
        bufs = (b0, ring_buffers(RING, BLOCK_N, HAS_ZERO))
    else:
        bufs = (b0,)
    LS: gl.constexpr = vec16_layout(2, W)
    LZ: gl.constexpr = vec16_layout(1, W)
    s_ptrs = s_base + gl.arange(0, BLOCK_N, layout=LS)
    z_ptrs = z_base + gl.arange(0, BLOCK_N, layout=LZ)
    acc, zero, ones = loop_terms(BLOCK_N, BLOCK_M, True)
    last = gl.maximum(g_hi - 1, 0)
    for i in gl.static_range(RING - 1):
        ring_issue(bufs, wp, s_ptrs, z_ptrs, g_lo + i * PAIR, last, sg, i, RING, HAS_ZERO, GW)
    pdl_start(PDL)
    if XS:  # x_ptrs are x_stage_ptrs': every group's x in shared memory (k_loop's XS)
        x_ptrs = x_stage(x_ptrs, g_lo)
    xc = _x_ahead(x_ptrs, gl.minimum(g_lo, last), XA)
    if XA:  # unrolled by two: each group's x lands in registers that are free, no copies at the back edge
        for g in range(g_lo, g_hi - 1, 2):
            j = g - g_lo
            xn = gl.load(x_ptrs + (g + 1) * XW)
            ring_turn(bufs, wp, s_ptrs, z_ptrs, sg, j // PAIR, g_lo, last, RING, HAS_ZERO, GW)
            acc = _slot_group(acc, bufs[0], j // PAIR % RING, xc, g, zero, ones, BLOCK_N, BLOCK_M, HAS_ZERO, True)
            xc = gl.load(x_ptrs + gl.minimum(g + 2, last) * XW)
            if PAIR == 1:
                ring_turn(bufs, wp, s_ptrs, z_ptrs, sg, j + 1, g_lo, last, RING, HAS_ZERO, GW)
            acc = _slot_group(acc, bufs[PAIR - 1], (j + 1) // PAIR % RING, xn, g + 1, zero, ones, BLOCK_N, BLOCK_M,
                              HAS_ZERO, True)  # fmt: skip
        if (g_hi - g_lo) % 2 == 1:  # an odd count's last group (xc holds its x), first of its slot
            j = g_hi - 1 - g_lo
            ring_turn(bufs, wp, s_ptrs, z_ptrs, sg, j // PAIR, g_lo, last, RING, HAS_ZERO, GW)
            acc = _slot_group(acc, bufs[0], j // PAIR % RING, xc, g_hi - 1, zero, ones, BLOCK_N, BLOCK_M, HAS_ZERO,
                              True)  # fmt: skip
    else:
        for g in range(g_lo, g_hi):
            j = g - g_lo
            ring_turn(bufs, wp, s_ptrs, z_ptrs, sg, j, g_lo, last, RING, HAS_ZERO, GW)
            acc = _slot_group(acc, bufs[0], j % RING, x_ptrs, g, zero, ones, BLOCK_N, BLOCK_M, HAS_ZERO, False, XS)
    async_copy.wait_group(0)
    return acc


@gluon.jit
def int4_mma_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg, stride_sn,
    HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
    OFFSET_MMA: gl.constexpr, DEPTH: gl.constexpr, ROWS: gl.constexpr, RING: gl.constexpr = 0,
    PDL: gl.constexpr = False, t_ptr=None, TAIL_N=0, stride_tn=0, TAIL: gl.constexpr = 0,
    XA: gl.constexpr = False, PAIR: gl.constexpr = 1, probe_ptr=None, PROBE: gl.constexpr = False,
    XG: gl.constexpr = 0, XR: gl.constexpr = 1,
):  # fmt: skip
    """y[:, :N] = x @ W^T (int4 tiles) and, with TAIL, y[:, N:N + TAIL_N] = x @ tail^T (bf16 rows) in one launch
    (TAIL 1: a row of x at a time, tail_by_row; 2: the block's rows of x together, tail_by_block, from two rows up
    to blocks of 8: its accumulator takes 4 registers a row).
    XA: each group's x loaded ahead of its MMA (k_loop, _k_loop_ring); PAIR: groups to a ring slot. XG > 0: a
    program's XG (>= its groups) groups of x staged in shared memory after the PDL wait (x_stage), XR rows of
    them (1 when M is 1: the padding rows repeat it; else BLOCK_M). PROBE: each
    program's timeline into probe_ptr (mma_common.probe_stamp: entry as points 0-2, k loop done 3, end 4-5)."""
    # rows of x in blocks of BLOCK_M along the fastest grid axis: the blocks of one weight tile run together,
    # so all but the first read it from L2
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    pid_k = gl.program_id(2)
    if TAIL > 0:  # programs past the N tiles compute the bf16 tail rows (output columns N .. N + TAIL_N)
        if pid_n >= N // BLOCK_N:
            if pid_k == 0:
                if TAIL == 1:
                    tail_by_row(x_ptr, t_ptr, y_ptr + N, (pid_n - N // BLOCK_N) * gl.num_warps(), TAIL_N, M,
                               pid_m * BLOCK_M, K, stride_xm, stride_ym, stride_tn, BLOCK_M, PDL)  # fmt: skip
                else:
                    tail_by_block(x_ptr, t_ptr, y_ptr + N, (pid_n - N // BLOCK_N) * gl.num_warps(), TAIL_N, M,
                                pid_m * BLOCK_M, K, stride_xm, stride_ym, stride_tn, BLOCK_M, PDL)  # fmt: skip
        else:
            _tile_program(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                          stride_sg, stride_sn, pid_m, pid_n, pid_k, HAS_ZERO, BLOCK_N, BLOCK_M, SPLIT_K,
                          OFFSET_MMA, DEPTH, ROWS, RING, PDL, XA, PAIR, probe_ptr, PROBE, XG, XR)  # fmt: skip
    else:
        _tile_program(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg,
                      stride_sn, pid_m, pid_n, pid_k, HAS_ZERO, BLOCK_N, BLOCK_M, SPLIT_K, OFFSET_MMA, DEPTH, ROWS,
                      RING, PDL, XA, PAIR, probe_ptr, PROBE, XG, XR)  # fmt: skip


@gluon.jit
def _tile_program(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg, stride_sn,
    pid_m, pid_n, pid_k, HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
    SPLIT_K: gl.constexpr, OFFSET_MMA: gl.constexpr, DEPTH: gl.constexpr, ROWS: gl.constexpr, RING: gl.constexpr,
    PDL: gl.constexpr, XA: gl.constexpr = False, PAIR: gl.constexpr = 1, probe_ptr=None, PROBE: gl.constexpr = False,
    XG: gl.constexpr = 0, XR: gl.constexpr = 1,
):  # fmt: skip
    """One program of int4_mma_kernel: BLOCK_N rows of W, BLOCK_M rows of x, its 1/SPLIT_K of the groups."""
    if PROBE:  # the wait is inside the loop (the weights go ahead of it): entry stands for the first three points
        probe_stamp(probe_ptr, 0, pid_n)
        probe_stamp(probe_ptr, 1, pid_n)
        probe_stamp(probe_ptr, 2, pid_n)
    W: gl.constexpr = gl.num_warps()
    S: gl.constexpr = BLOCK_N // 16
    LW: gl.constexpr = words_layout(W)
    MMA: gl.constexpr = mma_layout(W)
    n_groups = K // GROUP  # split_groups' arithmetic inline: through it a packaged ring tile spilled 16 bytes
    per_split = gl.cdiv(n_groups, SPLIT_K)
    g_lo = pid_k * per_split
    g_hi = gl.minimum(g_lo + per_split, n_groups)

    stripe = pid_n * S + iota4(S, 0, LW)
    lane = iota4(32, 2, LW)
    if ROWS:  # [S, r3, lane, w]: row 16 stripe + 8 r3 + g, words 4 t + w of the group's 16 (16 bytes per thread)
        GW: gl.constexpr = GROUP // 8
        w_rows = stripe * 16 + iota4(2, 1, LW) * 8 + lane // 4
        w_ptrs = w_ptr + w_rows.to(gl.int64) * (K // 8) + (lane % 4) * 4 + iota4(4, 3, LW)
    else:  # stripe (pid_n * S + s) starts at its row of [N/16, 2K]; a group is 256 contiguous words of it
        GW: gl.constexpr = 2 * GROUP
        inner = iota4(2, 1, LW) * 128 + lane * 4 + iota4(4, 3, LW)
        w_ptrs = w_ptr + stripe.to(gl.int64) * (2 * K) + inner
    z_lo = z_ptr + (stripe * 16 + lane // 4) * stride_sn  # row 16 stripe + g; row + 8 at +8 (fragment order)
    rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
    s_ptrs = s_ptr + rows * stride_sn
    z_rows = z_ptr + rows * stride_sn
    # rows of x past M re-read row M - 1 (their outputs are not stored): unmasked loads, no zero fill
    if XG > 0:  # the loop stages x itself (after its PDL wait): its pointers in the staging layout
        x_ptrs = x_stage_ptrs(x_ptr, gl.minimum(pid_m * BLOCK_M + x_stage_rows(XR), M - 1), stride_xm, g_lo,
                              gl.maximum(g_hi - 1, 0), XG)  # fmt: skip
    else:
        xn = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, x_words_layout(W))))
        x_ptrs = x_word_ptrs(x_ptr, gl.minimum(pid_m * BLOCK_M + xn, M - 1), stride_xm, BLOCK_M)

    if RING > 0:  # fragment order: a group's scales / zeros are BLOCK_N contiguous entries of row g
        acc = _k_loop_ring(w_ptrs, s_ptr + pid_n * BLOCK_N, z_ptr + pid_n * BLOCK_N, stride_sg, x_ptrs, g_lo, g_hi,
                           BLOCK_N, BLOCK_M, HAS_ZERO, RING, GW, PDL, XA, PAIR, XG > 0)  # fmt: skip
    else:
        acc = k_loop(w_ptrs, s_ptrs, z_lo, z_rows, stride_sg, x_ptrs, g_lo, g_hi, BLOCK_N, BLOCK_M, HAS_ZERO,
                      OFFSET_MMA, DEPTH, ROWS, GW, PDL, XA, XG > 0)  # fmt: skip
    if PROBE:
        probe_stamp(probe_ptr, 3, gl.max(gl.max(acc, axis=1), axis=0).to(gl.int32, bitcast=True))

    store_y(acc, rows, y_ptr, part_ptr, cnt_ptr, M, N, stride_ym, pid_m, pid_n, pid_k, BLOCK_N, BLOCK_M, SPLIT_K)
    if PROBE:
        probe_stamp(probe_ptr, 4, pid_n)
        probe_stamp(probe_ptr, PROBE_LAST, pid_n)


def int4_mma_variant(
    block_n: int, block_m: int, split_k: int, warps: int, zero: bool, offset_mma: bool = True, depth: int = 2,
    rows: bool = False, ring: int = 0, tail: int = 0, pdl: bool = False, xa: bool = False, max_regs: int = 0,
    pair: bool = False, xg: int = 0, xr: int = 1,
):
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot; max_regs rides
    with the constexprs as the launch option maxnreg, linear_aot.OPTIONS); xg > 0: x staged, xg groups of xr rows."""
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*u8" if zero else "*bf16",
           "y_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
           "stride_xm": "i32", "stride_ym": "i32", "stride_sg": "i32", "stride_sn": "i32", "t_ptr": "*bf16",
           "TAIL_N": "i32", "stride_tn": "i32"}  # fmt: skip
    cex = dict(HAS_ZERO=zero, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split_k, OFFSET_MMA=offset_mma,
               DEPTH=depth, ROWS=rows, RING=ring, TAIL=tail, PDL=pdl, XA=xa, PAIR=2 if pair else 1, maxnreg=max_regs,
               XG=xg, XR=xr)  # fmt: skip
    name = (f"int4 mma{' rows' if rows else ''}{' asym' if zero else ''}{'' if offset_mma else ' fma-offset'} BLOCK_N={block_n} "
            f"BLOCK_M={block_m} split {split_k} w{warps} {f'ring {ring}' if ring else f'depth {depth}'}"
            f"{f' tail {tail}' if tail else ''}{' pdl' if pdl else ''}{' x ahead' if xa else ''}{' pairs' if pair else ''}{f' x staged {xg}x{xr}' if xg else ''}{f' maxnreg {max_regs}' if max_regs else ''}")  # fmt: skip
    return name, int4_mma_kernel, sig, cex, warps


X_STAGE_BYTES = 32 * 1024  # a program's staged x at most (shared memory beside the ring's and other programs')


def x_stage_shape(cfg: SkinnyConfig, k: int, one_row: bool) -> tuple[int, int]:
    """(XG, XR) of a tile that stages x (x_stage; (0, 1) otherwise): its split's groups rounded up to a power of
    two, and one row where a program reads one (the padding rows repeat it), else the tile's BLOCK_M; checked to
    fit X_STAGE_BYTES."""
    if not cfg.x_staged:
        return 0, 1
    xg = triton.next_power_of_2(-(-(k // GROUP_K) // cfg.split_k))
    xr = 1 if one_row else cfg.block_m
    if xg * xr * GROUP_K * 2 > X_STAGE_BYTES:
        raise ValueError(f"mma: x staged for {xr} rows of K = {k} at split {cfg.split_k} takes "
                         f"{xg * xr * GROUP_K * 2} bytes of shared memory a program, over {X_STAGE_BYTES}")  # fmt: skip
    return xg, xr


X_STAGED_MODES = ("one", "tile", "off", "all")


def x_staged_choice(cfg: SkinnyConfig, k: int, one_row: bool) -> SkinnyConfig:
    """A table tile as HINFER_X_STAGED says (read at every call, to set both ways side by side in one process):
    `one` (the default) x staged (and not loaded ahead) wherever a program reads one row of x and its groups fit
    X_STAGE_BYTES (one-lane decode on an H100: 35B-A3B +3.4%, 122B-A10B +2.0%), `tile` as the table has it (no
    packaged tile sets it), `off` nowhere, `all` wherever the staged groups fit (eight rows of x staged measured
    9% slower at eight lanes)."""
    mode = os.environ.get("HINFER_X_STAGED", "one").strip()
    if mode not in X_STAGED_MODES:
        raise ValueError(f"HINFER_X_STAGED must be one of {', '.join(X_STAGED_MODES)}, got {mode!r}")
    if mode == "off":
        return replace(cfg, x_staged=False)
    if mode == "tile" or (mode == "one" and not one_row):
        return cfg
    return staged_where_fits(cfg, k, one_row)


def staged_where_fits(cfg: SkinnyConfig, k: int, one_row: bool) -> SkinnyConfig:
    """The tile with x staged (and so not loaded ahead) where its staged groups fit X_STAGE_BYTES, else as it is."""
    staged = replace(cfg, x_staged=True, x_ahead=False, ring_pairs=False)
    try:
        x_stage_shape(staged, k, one_row)
    except ValueError:
        return cfg
    return staged


class Int4Tensors(Protocol):
    """What the kernel reads of a weight: hinfer.quant.int4_mma_weight.Int4MmaWeight (`words`, scales / zeros
    [G, N]) or hinfer.quant.int4.Int4Weight (`qweight`, scales / zeros [N, G], `group`); duck-typed, so the
    kernels need not import the formats above them."""

    scales: torch.Tensor
    zeros: torch.Tensor | None

    @property
    def shape(self) -> tuple[int, int]: ...


def int4_mma_matmul(
    x: torch.Tensor, w: Int4Tensors, out: torch.Tensor | None = None, cfg: SkinnyConfig | None = None,
    offset_mma: bool | None = None, tail: torch.Tensor | None = None, probe: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, N] = x [M, K] @ W^T (bf16), 1 <= M <= 64: W in fragment order (Int4MmaWeight) or in hinfer.quant.int4's
    row layout (Int4Weight, group 128: each thread then loads 16 bytes of two rows, g and g + 8, which hold the
    same K offsets as a fragment-ordered word). `cfg`: the tile (mma_config's form; the table's stages x in shared
    memory as HINFER_X_STAGED says, x_staged_choice); `offset_mma` (default: not
    the tile's fma_offset): take (128 + z) sum x off each group's partial (sum x from a second MMA against ones);
    False (fragment order only): one bf16x2 fma per weight register subtracts 128 + z before the MMA.
    `tail` [T, K] bf16: rows computed in the same launch on CUDA cores into out[:, N:N + T] (`out` is then the
    whole [M, N + T] output, given). `probe` (int64 [programs, PROBE_POINTS]) takes each program's timeline
    (bench/moe_chain_probe.py)."""
    m, k = x.shape
    rows = hasattr(w, "qweight")  # the row layout (Int4Weight); else fragment order (Int4MmaWeight)
    n = w.shape[0]
    if k != w.shape[1] or k % GROUP_K or m > MAX_M or x.dtype != torch.bfloat16 or (rows and w.group != GROUP_K):
        raise ValueError(f"int4 mma: x [M <= {MAX_M}, K % {GROUP_K} == 0] bf16 matching W {tuple(w.shape)}, "
                         f"got {tuple(x.shape)} {x.dtype}")  # fmt: skip
    if x.stride(-1) != 1 or x.stride(0) % 2:  # the kernel reads x's rows as bf16 pairs
        x = x.contiguous()
    if cfg is None:
        cfg = mma_config(m, n, k)
        if rows and cfg.ring:  # the ring streams fragment-ordered words: the row layout takes the register look-ahead
            cfg = replace(cfg, ring=0, ring_pairs=False)
        cfg = x_staged_choice(cfg, k, m == 1)
    if offset_mma is None:
        offset_mma = rows or not cfg.fma_offset
    if rows and not offset_mma:
        raise ValueError("int4 mma: the per-weight offset variant needs fragment order")
    block_n, block_m, split, warps = cfg.block_n, cfg.block_m, cfg.split_k, cfg.num_warps
    if (n % block_n or block_n % (16 * warps) or block_m not in (8, 16, 32, 64)
            or cfg.num_stages not in (2, 4) or cfg.ring == 1 or (cfg.ring and (rows or not offset_mma))
            or (cfg.ring_pairs and not (cfg.ring and cfg.x_ahead)) or (cfg.x_staged and cfg.x_ahead)):  # fmt: skip
        raise ValueError(f"int4 mma: bad tile for N={n}, M={m}: {cfg}")
    xg, xr = x_stage_shape(cfg, k, m == 1)
    tail_n = tail_rows(tail, out, m, n, k)
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    grid = (-(-m // block_m), n // block_n + -(-tail_n // warps), split)  # tail: a row per warp
    part, cnt = split_scratch(split, m, n, grid[0] * grid[1], x, out)
    if rows:  # scales / zeros [N, G]
        words, sg, sn = w.qweight, 1, w.scales.shape[1]  # type: ignore[attr-defined]
    else:  # [G, N]
        words, sg, sn = w.words, n, 1  # type: ignore[attr-defined]
    int4_mma_kernel[grid](
        x, words, w.scales, w.zeros if w.zeros is not None else w.scales, out, part, cnt, m, n, k,
        x.stride(0), out.stride(0), sg, sn,
        HAS_ZERO=w.zeros is not None, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split,
        OFFSET_MMA=offset_mma, DEPTH=cfg.num_stages, ROWS=rows, RING=cfg.ring, num_warps=warps,
        t_ptr=x if tail is None else tail, TAIL_N=tail_n, stride_tn=0 if tail is None else tail.stride(0),
        TAIL=0 if tail is None else 2 if 1 < m and block_m <= 8 else 1, XA=cfg.x_ahead, PAIR=2 if cfg.ring_pairs else 1, XG=xg, XR=xr, **pdl_kwargs(x),
        probe_ptr=probe, PROBE=probe is not None, **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
    )  # fmt: skip
    return out

