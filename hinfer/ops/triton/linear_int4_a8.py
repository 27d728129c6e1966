"""INT4 x INT8 skinny matmul on tensor cores from fragment-ordered weights (Gluon): the int4 decode with x in int8.

y [M, N] = x [M, K] @ W^T for M = 1..8, W in hinfer.quant.int4_mma_layout order, x quantized per row and
128-group to int8 (hinfer.quant.int4.quantize_act_int8_ref). Why: the bf16 kernel
(linear_int4_mma) is bound by its instruction issue, and most of its instructions unpack nibbles into bf16 (3
shifts and 4 lop3 a word, then an MMA per k16 step). Here one shift and two lop3 turn a word into two int8 x 4
registers holding 16 (u - 8) of rows g and g + 8 (int4_mma_layout.s8_registers: flipping a nibble's top bit
reads it as u - 8 in two's complement, shifted into the byte's high half), exactly the A fragment rows of an
int8 MMA (m16n8k32, s32 accumulate) whose K order is the words' own; a k32 MMA takes two words.

Each program first quantizes its share of x (its rows, its split's groups) into shared memory, after the PDL
wait; the weights stream through the cp.async ring meanwhile (issued before the wait, nothing writes them). Or,
with the tile's x_ahead, x is quantized once in its own launch (act_int8) and each group's bytes are read from
global memory in the turn (no prologue, no x in shared memory: at 8 rows every program would otherwise quantize
all of its K slice of 8 rows). x's bytes are laid out in the order the B fragment reads them: byte b of word w of
a row is K offset 4 w + (0, 2, 1, 3)[b] of the group, so a thread's B registers are 8 contiguous words. Per
group the partial is s_w s_x (S / 16 - (z - 8) sum xq) from the exact s32 sum S, with s_x and s_x sum xq kept
beside the bytes. Reference twin: hinfer.quant.int4_mma_layout.emulate_kernel_a8.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

from hinfer.ops.triton.act_int8 import NormIn, XInt8, quantize_x_int8
from hinfer.ops.triton.common import GROUP as GROUP_K
from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_int4_mma import (
    Int4Tensors,
    ring_buffers,
    ring_issue,
    ring_turn,
    unpacked_layout,
    words_layout,
)
from hinfer.ops.triton.linear_splitk import split_scratch
from hinfer.ops.triton.mma_common import (
    flat_smem,
    iota4,
    mma_layout,
    pdl_start,
    split_groups,
    store_y,
    tail_by_row,
    tail_rows,
    vec16_layout,
)
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.linear import a8_config

GROUP = gl.constexpr(GROUP_K)
SMEM_LIMIT = 160 * 1024  # bytes a program may hold (ring + quantized x); more takes the bf16 kernel

# a word -> $0: bytes 16 (u - 8) of nibble positions 0, 2, 4, 6 (row g), $1: positions 1, 3, 5, 7 (row g + 8);
# lop3 0x28 = (a ^ b) & c
_S8_LOHI = gl.constexpr("""{
.reg .b32 sh;
shl.b32 sh, $2, 4;
lop3.b32 $0, sh, 0x80808080, 0xf0f0f0f0, 0x28;
lop3.b32 $1, $2, 0x80808080, 0xf0f0f0f0, 0x28;
}""")
_S8_ARGS = gl.constexpr("=r,=r" + ",r" * 8)  # 8 int8 outputs in two registers, the word 8 times
# [S, kc, g, t, p, h, r3, b] -> [S, r3, g, kc, p, h, t, b]: row 16 S + 8 r3 + g, MMA column 64 kc + 32 p + 16 h
# + 4 t + b (word kq = 2 p + h of chunk kc is half h of k32 step 2 kc + p)
A8_PERM = gl.constexpr((0, 6, 2, 1, 4, 5, 3, 7))
# [n, t, kc, p, h, b] -> [kc, p, h, t, b, n]
B8_PERM = gl.constexpr((2, 3, 4, 1, 5, 0))


@gluon.constexpr_function
def _xq_bytes_layout(num_warps):
    # [row of x, 32 words, 4 bytes]: lane 4 g + t holds row g's words 8 t .. 8 t + 7 (its B registers); every
    # warp holds all of x (the B operand is shared)
    return gl.BlockedLayout([1, 8, 4], [8, 4, 1], [1, num_warps, 1], [2, 1, 0])


@gluon.constexpr_function
def _xq_words_layout(num_warps):
    return gl.SliceLayout(2, _xq_bytes_layout(num_warps))


@gluon.constexpr_function
def _quant_layout(xrows, num_warps):
    # [XQ groups, row of x, 4 pieces, 32 values]: 64 bytes of bf16 per thread, a group across 4 lanes; warps over
    # rows, or over groups when there are fewer rows than warps (A8Shape says how many groups a step takes)
    wr = min(num_warps, xrows)
    return gl.BlockedLayout([1, 1, 1, 32], [8, 1, 4, 1], [num_warps // wr, wr, 1, 1], [3, 2, 1, 0])


# 4 fp32 (x * 127 / amax, K offsets 0..3 of a word) -> $0: the word of their int8 values rounded to nearest even,
# bytes in the order (0, 2, 1, 3); $1: their sum (dp4a against ones); $2, $3 unused
_PACK_S8 = gl.constexpr("""{
.reg .b32 a, b, c, d, lo, hi;
cvt.rni.s32.f32 a, $4;
cvt.rni.s32.f32 b, $5;
cvt.rni.s32.f32 c, $6;
cvt.rni.s32.f32 d, $7;
prmt.b32 lo, a, c, 0x0040;
prmt.b32 hi, b, d, 0x0040;
prmt.b32 $0, lo, hi, 0x5410;
dp4a.s32.s32 $1, $0, 0x01010101, 0;
mov.b32 $2, 0;
mov.b32 $3, 0;
}""")


@gluon.jit
def _nth_of_4(v, E: gl.constexpr, XQ: gl.constexpr, XROWS: gl.constexpr):
    """[XQ, XROWS, 4, 32] -> [XQ, XROWS, 4, 8]: elements E, E + 4, .. (register selection only)."""
    b0, b1 = gl.split(gl.reshape(v, [XQ, XROWS, 4, 8, 2, 2]))  # e = 2 a + b: b first
    if E % 2 == 0:
        t = b0
    else:
        t = b1
    a0, a1 = gl.split(t)
    if E // 2 == 0:
        r = a0
    else:
        r = a1
    return r


@gluon.jit
def _per_column(v, XQ: gl.constexpr, XROWS: gl.constexpr):
    """[XQ, XROWS] -> [XQ, 8]: a value per MMA column (column n: stored row n % XROWS)."""
    if XROWS == 1:
        r = v + gl.full([XQ, 8], 0.0, gl.float32, layout=v.type.layout)
    elif XROWS == 8:
        r = v
    else:  # through a plain layout (once per XQ groups)
        L3: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 1, 32], [1, 1, gl.num_warps()], [2, 1, 0])
        t3 = gl.expand_dims(gl.convert_layout(v, gl.SliceLayout(1, L3)), 1)
        r = gl.reshape(t3 + gl.zeros([XQ, 8 // XROWS, XROWS], gl.float32, layout=L3), [XQ, 8])
    return r


@gluon.jit
def _quantize_x(x_ptr, xq_smem, sx_smem, sq_smem, m0, M, K, stride_xm, g_lo, n_local, XROWS: gl.constexpr,
                XQ: gl.constexpr, ACT: gl.constexpr):  # fmt: skip
    """x's rows m0 .. m0 + XROWS - 1 (clamped to M - 1), groups g_lo .. g_lo + n_local - 1, into int8 words in
    xq_smem [XG / XQ, XQ, XROWS, 32] (K offset 4 w + (0, 2, 1, 3)[b] of the group at byte b of word w), the
    scales amax / 127 in sx_smem and scale * sum q in sq_smem ([XG / XQ, XQ, 8]: per MMA column); q = round(x *
    (127 / amax)), as hinfer.quant.int4.quantize_act_int8_ref (|x| * 127 / amax <= 127 + rounding: no clamp).
    ACT: a row of x_ptr is [gate | up] (2 K) and x = silu(gate) * up, with act_int8's (the SiLU-mul kernel's)
    roundings."""
    LQ: gl.constexpr = _quant_layout(XROWS, gl.num_warps())
    gi = iota4(XQ, 0, LQ)
    row = gl.minimum(m0 + iota4(XROWS, 1, LQ), M - 1)
    col = iota4(4, 2, LQ) * 32 + iota4(32, 3, LQ)
    base = x_ptr + row.to(gl.int64) * stride_xm + col
    for jb in range(0, n_local, XQ):
        ok = (jb + gi) < n_local
        v = gl.load(base + (g_lo + jb + gi) * GROUP, mask=ok & (col >= 0), other=0.0).to(gl.float32)
        if ACT:
            u = gl.load(base + K + (g_lo + jb + gi) * GROUP, mask=ok & (col >= 0), other=0.0)
            v = (v / (1.0 + gl.exp(-v))).to(u.dtype).to(gl.float32)
            v = (v * u.to(gl.float32)).to(u.dtype).to(gl.float32)
        amax = gl.max(gl.max(gl.abs(v), axis=3), axis=2)  # [XQ, XROWS]
        pos = amax > 0.0
        safe = gl.where(pos, amax, 1.0)
        s = gl.where(pos, gl.div_rn(safe, 127.0), 1.0)
        r = gl.where(pos, gl.div_rn(gl.full(safe.shape, 127.0, gl.float32, layout=safe.type.layout), safe), 1.0)
        o = gl.inline_asm_elementwise(_PACK_S8, "=r,=r,=r,=r,r,r,r,r", [v * r[:, :, None, None]], dtype=gl.int32,
                                      is_pure=True, pack=4)  # fmt: skip
        words = _nth_of_4(o, 0, XQ, XROWS)  # [XQ, XROWS, 4, 8]: word 8 t + w of the group
        sums = gl.sum(gl.sum(_nth_of_4(o, 1, XQ, XROWS), axis=3), axis=2)
        sq = gl.convert_layout(sums, s.type.layout).to(gl.float32) * s
        xq_smem.index(jb // XQ).store(gl.reshape(words, [XQ, XROWS, 32]))
        sx_smem.index(jb // XQ).store(_per_column(s, XQ, XROWS))
        sq_smem.index(jb // XQ).store(_per_column(sq, XQ, XROWS))


@gluon.jit
def _a_operand_s8(words, BLOCK_N: gl.constexpr, DOT_A: gl.constexpr):
    """words int32 [S, 2, 32, 4] -> the int8 A operand [BLOCK_N, 128] of 16 (u - 8), registers renamed only."""
    L5: gl.constexpr = unpacked_layout(gl.num_warps())
    w8 = gl.expand_dims(words, 4) + gl.zeros([BLOCK_N // 16, 2, 32, 4, 8], gl.int32, layout=L5)
    t = gl.inline_asm_elementwise(_S8_LOHI, _S8_ARGS, [w8], dtype=gl.int8, is_pure=True, pack=8)
    # t: [S, kc, lane, kq, e]: e = 4 r3 + b (lo bytes, then hi), lane = 4 g + t, kq = 2 p + h
    t = gl.reshape(t, [BLOCK_N // 16, 2, 8, 4, 2, 2, 2, 4])
    t = gl.permute(t, A8_PERM.value)
    t = gl.reshape(t, [BLOCK_N, GROUP])
    return gl.convert_layout(t, DOT_A, assert_trivial=True)


@gluon.jit
def _b_operand_s8(xw, BLOCK_M: gl.constexpr, DOT_B: gl.constexpr):
    """x's int8 words [BLOCK_M, 32] of one group -> the B operand [128, BLOCK_M], registers renamed only."""
    x4 = gl.expand_dims(xw, 2) + gl.zeros([BLOCK_M, 32, 4], gl.int32, layout=_xq_bytes_layout(gl.num_warps()))
    xb = gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r,r,r", [x4], dtype=gl.int8, is_pure=True, pack=4)
    b = gl.reshape(xb, [BLOCK_M, 4, 2, 2, 2, 4])  # [n, t, kc, p, h, b]
    b = gl.permute(b, B8_PERM.value)
    b = gl.reshape(b, [GROUP, BLOCK_M])
    return gl.convert_layout(b, DOT_B, assert_trivial=True)


@gluon.constexpr_function
def _x_rows_layout(xrows, num_warps):
    # [8 / XROWS, XROWS, 32 words]: lane 4 g + t at (g // XROWS, g % XROWS), words 8 t .. 8 t + 7
    return gl.BlockedLayout([1, 1, 8], [8 // xrows, xrows, 4], [1, 1, num_warps], [2, 1, 0])


@gluon.jit
def _x_rows(x_smem, BLOCK_M: gl.constexpr):
    """One group of x's stored rows [XROWS, 32] -> [BLOCK_M, 32] int32 in _xq_words_layout: MMA column n reads
    stored row n % XROWS (the columns past M are not stored), a register broadcast."""
    W: gl.constexpr = gl.num_warps()
    XROWS: gl.constexpr = x_smem.shape[0]
    if XROWS == BLOCK_M:
        xw = x_smem.load(_xq_words_layout(W))
    else:
        L3: gl.constexpr = _x_rows_layout(XROWS, W)
        v = gl.expand_dims(x_smem.load(gl.SliceLayout(0, L3)), 0)
        v = v + gl.zeros([BLOCK_M // XROWS, XROWS, 32], gl.int32, layout=L3)
        xw = gl.convert_layout(gl.reshape(v, [BLOCK_M, 32]), _xq_words_layout(W), assert_trivial=True)
    return xw


@gluon.jit
def _slot_group_a8(acc, buf, i, xw, sx, sq, zero, BLOCK_N: gl.constexpr, HAS_ZERO: gl.constexpr):
    """acc + one group's partial: weights from ring slot i, x's words xw [BLOCK_M, 32] (_xq_words_layout), its
    scales sx and scale * sum q sq per MMA column."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = zero.type.layout
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    SN: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    w_smem, s_smem, z_smem = buf
    words = w_smem.index(i).load(words_layout(W))
    part = mma_v2(_a_operand_s8(words, BLOCK_N, DOT_A), _b_operand_s8(xw, xw.shape[0], DOT_B), zero)
    sw = s_smem.index(i).load(SN).to(gl.float32)
    acc += part.to(gl.float32) * (sw * 0.0625)[:, None] * sx[None, :]
    if HAS_ZERO:
        zc = z_smem.index(i).load(SN).to(gl.float32) - 8.0
        acc -= (sw * zc)[:, None] * sq[None, :]
    return acc


@gluon.jit
def _x_stored(xq_smem, sx_smem, sq_smem, j, BLOCK_M: gl.constexpr, SM: gl.constexpr):
    """The program's j-th group of x as its prologue stored it: words, scales, scale * sum q."""
    return _x_rows(xq_smem.index(j), BLOCK_M), sx_smem.index(j).load(SM), sq_smem.index(j).load(SM)


@gluon.jit
def _x_pre(xw_rows, xs_rows, g):
    """Group g of x quantized ahead (act_int8.XInt8 in global memory; xw_rows / xs_rows: its rows' words and
    scale offsets): words [BLOCK_M, 32] (32 contiguous bytes a thread), scales, scale * sum q."""
    xw = gl.load(xw_rows + g * 32)
    return xw, gl.load(xs_rows[0] + g), gl.load(xs_rows[1] + g)


@gluon.jit
def int4_a8_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg,
    HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
    RING: gl.constexpr, XROWS: gl.constexpr, XG: gl.constexpr, XQ: gl.constexpr, PDL: gl.constexpr = False,
    t_ptr=None, TAIL_N=0, stride_tn=0, TAIL: gl.constexpr = False, xw_ptr=None, xs_ptr=None, xsum_ptr=None,
    XPRE: gl.constexpr = False, ACT: gl.constexpr = False,
):  # fmt: skip
    """y[:, :N] = x @ W^T (int4 fragment-ordered tiles, x in int8) and, with TAIL, y[:, N:N + TAIL_N] = x @
    tail^T (bf16 rows, linear_int4_mma._tail_rows). XROWS, XQ, XG: A8Shape's (rows of x quantized per program,
    groups a prologue step quantizes, groups of x a program holds). ACT: x's rows are [gate | up] and the prologue
    quantizes silu(gate) * up (the MLP's down projection)."""
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    pid_k = gl.program_id(2)
    if TAIL:
        if pid_n >= N // BLOCK_N:
            if pid_k == 0:
                tail_by_row(x_ptr, t_ptr, y_ptr + N, (pid_n - N // BLOCK_N) * gl.num_warps(), TAIL_N, M,
                           pid_m * BLOCK_M, K, stride_xm, stride_ym, stride_tn, BLOCK_M, PDL)  # fmt: skip
        else:
            _a8_program(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym,
                        stride_sg, pid_m, pid_n, pid_k, HAS_ZERO, BLOCK_N, BLOCK_M, SPLIT_K, RING, XROWS, XG, XQ,
                        PDL, xw_ptr, xs_ptr, xsum_ptr, XPRE, ACT)  # fmt: skip
    else:
        _a8_program(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg,
                    pid_m, pid_n, pid_k, HAS_ZERO, BLOCK_N, BLOCK_M, SPLIT_K, RING, XROWS, XG, XQ, PDL, xw_ptr,
                    xs_ptr, xsum_ptr, XPRE, ACT)  # fmt: skip


@gluon.jit
def _a8_program(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg, pid_m, pid_n,
    pid_k, HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
    RING: gl.constexpr, XROWS: gl.constexpr, XG: gl.constexpr, XQ: gl.constexpr, PDL: gl.constexpr, xw_ptr, xs_ptr,
    xsum_ptr, XPRE: gl.constexpr, ACT: gl.constexpr,
):  # fmt: skip
    W: gl.constexpr = gl.num_warps()
    S: gl.constexpr = BLOCK_N // 16
    LW: gl.constexpr = words_layout(W)
    MMA: gl.constexpr = mma_layout(W)
    GW: gl.constexpr = 2 * GROUP
    g_lo, g_hi = split_groups(K, SPLIT_K, pid_k)
    n_local = gl.maximum(g_hi - g_lo, 0)
    last = gl.maximum(g_hi - 1, 0)

    stripe = pid_n * S + iota4(S, 0, LW)
    inner = iota4(2, 1, LW) * 128 + iota4(32, 2, LW) * 4 + iota4(4, 3, LW)
    w_ptrs = w_ptr + stripe.to(gl.int64) * (2 * K) + inner
    s_ptrs = s_ptr + pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=vec16_layout(2, W))
    z_ptrs = z_ptr + pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=vec16_layout(1, W))
    bufs = (ring_buffers(RING, BLOCK_N, HAS_ZERO),)
    SM: gl.constexpr = gl.SliceLayout(0, MMA)
    for i in gl.static_range(RING - 1):  # the weights ahead of the PDL wait (nothing writes them)
        ring_issue(bufs, w_ptrs, s_ptrs, z_ptrs, g_lo + i, last, stride_sg, i, RING, HAS_ZERO, GW)
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    zero = gl.zeros([BLOCK_N, BLOCK_M], gl.int32, layout=MMA)
    if XPRE:  # x quantized ahead, in global memory: each group's words read in the turn (L2-resident)
        LX: gl.constexpr = _xq_words_layout(W)
        xm = gl.minimum(pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LX)), M - 1)
        xw_rows = (xw_ptr + (xm.to(gl.int64) * (K // GROUP) * 32)[:, None]  # rows 128-byte aligned: 16-byte loads
                   + gl.arange(0, 32, layout=gl.SliceLayout(0, LX))[None, :])  # fmt: skip
        sm = gl.minimum(pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=SM), M - 1).to(gl.int64) * (K // GROUP)
        xs_rows = (xs_ptr + sm, xsum_ptr + sm)
        pdl_start(PDL)
        for g in range(g_lo, g_hi):
            xw, sx, sq = _x_pre(xw_rows, xs_rows, g)  # issued before the ring's wait: their latency under it
            ring_turn(bufs, w_ptrs, s_ptrs, z_ptrs, stride_sg, g - g_lo, g_lo, last, RING, HAS_ZERO, GW)
            acc = _slot_group_a8(acc, bufs[0], (g - g_lo) % RING, xw, sx, sq, zero, BLOCK_N, HAS_ZERO)
    else:
        # written XQ groups at a time ([XG / XQ, XQ, ...]), read a group at a time ([XG, ...]): the same bytes
        xq_smem = gl.allocate_shared_memory(gl.int32, [XG // XQ, XQ, XROWS, 32], flat_smem(3))
        sx_smem = gl.allocate_shared_memory(gl.float32, [XG // XQ, XQ, BLOCK_M], flat_smem(2))
        sq_smem = gl.allocate_shared_memory(gl.float32, [XG // XQ, XQ, BLOCK_M], flat_smem(2))
        pdl_start(PDL)
        _quantize_x(x_ptr, xq_smem, sx_smem, sq_smem, pid_m * BLOCK_M, M, K, stride_xm, g_lo, n_local, XROWS, XQ,
                    ACT)
        gl.thread_barrier()  # x's bytes are written by other threads than read them
        xq_smem = xq_smem._reinterpret(gl.int32, [XG, XROWS, 32], flat_smem(2))
        sx_smem = sx_smem._reinterpret(gl.float32, [XG, BLOCK_M], flat_smem(1))
        sq_smem = sq_smem._reinterpret(gl.float32, [XG, BLOCK_M], flat_smem(1))
        for g in range(g_lo, g_hi):
            j = g - g_lo
            ring_turn(bufs, w_ptrs, s_ptrs, z_ptrs, stride_sg, j, g_lo, last, RING, HAS_ZERO, GW)
            xw, sx, sq = _x_stored(xq_smem, sx_smem, sq_smem, j, BLOCK_M, SM)
            acc = _slot_group_a8(acc, bufs[0], j % RING, xw, sx, sq, zero, BLOCK_N, HAS_ZERO)
    async_copy.wait_group(0)
    rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
    store_y(acc, rows, y_ptr, part_ptr, cnt_ptr, M, N, stride_ym, pid_m, pid_n, pid_k, BLOCK_N, BLOCK_M, SPLIT_K)


@dataclass(frozen=True)
class A8Shape:
    """What a call's programs hold besides the tile. With x quantized in each program's prologue: XROWS rows of
    x (M rounded up to a power of two: MMA column n reads stored row n % XROWS, and the columns past M are not
    stored), XG groups of x (its split's, rounded up to XQ, the groups a prologue step quantizes: 8, or 8 per
    warp when one row leaves warps over). With x quantized ahead (the tile's x_ahead: act_int8, its own launch)
    none. And the ring's slots (at least 2)."""

    xrows: int
    xq: int
    xg: int
    ring: int
    pre: bool = False

    @classmethod
    def of(cls, m: int, k: int, cfg: SkinnyConfig) -> A8Shape:
        if cfg.x_ahead:  # one compiled form whatever M and the split
            return cls(1, 8, 8, max(cfg.ring, 2), True)
        xrows = 1 << (m - 1).bit_length()
        xq = 8 * (cfg.num_warps // min(cfg.num_warps, xrows))
        per_split = -(-(k // GROUP_K) // cfg.split_k)
        return cls(xrows, xq, -(-per_split // xq) * xq, max(cfg.ring, 2))

    def smem_bytes(self, block_n: int, zero: bool) -> int:
        """The ring (words, scales, zeros) and x's bytes and scales."""
        x = 0 if self.pre else self.xg * (self.xrows * 128 + 8 * 8)
        return self.ring * block_n * (64 + 2 + (1 if zero else 0)) + x


MAX_M = 64  # rows of x per call, with x quantized ahead (in each program's prologue: 8)


def a8_rows_fit(m: int, cfg: SkinnyConfig) -> bool:
    """Whether a tile takes m rows of x: with x quantized in each program's prologue up to 8 in one MMA column
    block of 8 (more would hold too many of x's values per thread there); with x quantized ahead (the tile's
    x_ahead: each group's bytes read from global memory) up to MAX_M, in column blocks of 8, 16 or 32."""
    if cfg.x_ahead:
        return 1 <= m <= MAX_M and cfg.block_m in (8, 16, 32)
    return 1 <= m <= cfg.block_m == 8


def a8_takes(m: int, n: int, k: int, cfg: SkinnyConfig | None = None, zero: bool = False) -> bool:
    """Whether the int4 x int8 kernel takes this call: its rows of x (a8_rows_fit), its shared memory under
    SMEM_LIMIT."""
    cfg = cfg or a8_config(m, n, k)
    return (a8_rows_fit(m, cfg) and k % GROUP_K == 0 and n % cfg.block_n == 0
            and A8Shape.of(m, k, cfg).smem_bytes(cfg.block_n, zero) <= SMEM_LIMIT)  # fmt: skip


def int4_a8_variant(block_n: int, split_k: int, warps: int, zero: bool, ring: int, m: int, k: int,
                    tail: bool = False, pdl: bool = False, max_regs: int = 0, pre: bool = False,
                    act: bool = False, block_m: int = 8):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot): the tile
    (block_n, split_k, warps, ring; pre: x quantized ahead; block_m: x's rows an MMA column block takes, 16 or
    32 only with pre) at m rows of x and K = k, shaped as a call is (A8Shape)."""
    cfg = SkinnyConfig(block_n, GROUP_K, block_m, split_k, warps, 2, ring, x_ahead=pre, max_regs=max_regs)
    a8 = A8Shape.of(m, k, cfg)
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*u8" if zero else "*bf16",
           "y_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
           "stride_xm": "i32", "stride_ym": "i32", "stride_sg": "i32", "t_ptr": "*bf16", "TAIL_N": "i32",
           "stride_tn": "i32", "xw_ptr": "*i32", "xs_ptr": "*fp32", "xsum_ptr": "*fp32"}  # fmt: skip
    cex = dict(HAS_ZERO=zero, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split_k, RING=a8.ring, XROWS=a8.xrows,
               XG=a8.xg, XQ=a8.xq, TAIL=tail, PDL=pdl, XPRE=pre, ACT=act, maxnreg=max_regs)  # fmt: skip
    name = (f"int4 a8{' asym' if zero else ''} BLOCK_N={block_n}{f' BLOCK_M={block_m}' if block_m != 8 else ''} "
            f"split {split_k} w{warps} ring {a8.ring} "
            f"{'x ahead' if pre else f'x rows {a8.xrows} x groups {a8.xg}'}{' tail' if tail else ''}"
            f"{' pdl' if pdl else ''}{' silu_mul' if act else ''}{f' maxnreg {max_regs}' if max_regs else ''}")  # fmt: skip
    return name, int4_a8_kernel, sig, cex, warps


def int4_a8_matmul(
    x: torch.Tensor, w: Int4Tensors, out: torch.Tensor | None = None, cfg: SkinnyConfig | None = None,
    tail: torch.Tensor | None = None, xq: XInt8 | None = None, silu_mul: bool = False, norm: NormIn | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, N] = x [M, K] @ W^T (bf16 in and out, x rounded to int8 per row and 128-group inside), 1 <= M <= 8
    (up to MAX_M with x quantized ahead: a tile's x_ahead, or `xq`), W fragment-ordered (Int4MmaWeight). `cfg`: the tile (mma_config's; its ring, at least 2 slots, always
    streams the weights; default a8_config's; its x_ahead: x quantized ahead in its own launch, act_int8, instead
    of in each program's prologue); `tail` as in linear_int4_mma.int4_mma_matmul; `xq`: x already quantized
    (act_int8.quantize_x_int8 of this x), read instead of x (a tail still reads x). `silu_mul`: x is [M, 2 K] =
    [gate | up] and the product is silu(gate) * up @ W^T, the activation applied where x is quantized (in the
    prologue, or in the launch ahead), with activation.silu_mul's roundings. `norm` (tiles with x_ahead only): the
    product is rms_norm(x + norm.residual) @ W^T, normed in the launch that quantizes x ahead, and x +
    norm.residual goes to norm.residual_out: the add + RMSNorm in front of the projection in that launch (no
    tail: it would read x un-normed). (In each program's prologue it measured slower: every program would sum the
    whole row's squares after the wait.)"""
    m, k = x.shape
    k //= 2 if silu_mul else 1
    n = w.shape[0]
    if (k != w.shape[1] or k % GROUP_K or not 1 <= m <= MAX_M or x.dtype != torch.bfloat16 or hasattr(w, "qweight")
            or (silu_mul and (x.shape[1] != 2 * k or tail is not None or xq is not None))
            or (norm is not None and (silu_mul or xq is not None or tail is not None))):  # fmt: skip
        raise ValueError(f"int4 a8: x [1 <= M <= {MAX_M}, K % {GROUP_K} == 0] bf16 matching fragment-ordered W "
                         f"{tuple(w.shape)}{' as [gate | up], no tail' * silu_mul}, got {tuple(x.shape)} {x.dtype}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    cfg = cfg or a8_config(m, n, k)
    zero = w.zeros is not None
    if xq is not None:  # x quantized by the caller: the tile reads it as a tile with x_ahead does
        cfg = replace(cfg, x_ahead=True)
    if cfg.block_n % (16 * cfg.num_warps) or not a8_takes(m, n, k, cfg, zero):
        raise ValueError(f"int4 a8: takes up to 8 rows of x in tiles of BLOCK_M = 8 (up to {MAX_M} in BLOCK_M 8, 16 "
                         f"or 32 with x quantized ahead) within {SMEM_LIMIT} bytes of shared memory; not M={m}, "
                         f"N={n}, K={k}, {cfg}")  # fmt: skip
    tail_n = tail_rows(tail, out, m, n, k)
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if xq is not None and xq.shape != (m, k):
        raise ValueError(f"int4 a8: x quantized ahead {xq.shape} for x {tuple(x.shape)}")
    if norm is not None and not cfg.x_ahead:
        raise ValueError(f"int4 a8: a norm in front needs a tile that quantizes x ahead, not {cfg}")
    act = silu_mul
    if xq is None and cfg.x_ahead:
        xq, act = quantize_x_int8(x, silu_mul=silu_mul, norm=norm), False
    a8 = A8Shape.of(m, k, replace(cfg, x_ahead=xq is not None))
    grid = (-(-m // cfg.block_m), n // cfg.block_n + -(-tail_n // cfg.num_warps), cfg.split_k)
    part, cnt = split_scratch(cfg.split_k, m, n, grid[0] * grid[1], x, out)
    int4_a8_kernel[grid](
        x, w.words, w.scales, w.zeros if zero else w.scales, out, part, cnt, m, n, k,  # type: ignore[attr-defined]
        x.stride(0), out.stride(0), n,
        HAS_ZERO=zero, BLOCK_N=cfg.block_n, BLOCK_M=cfg.block_m, SPLIT_K=cfg.split_k, RING=a8.ring, XROWS=a8.xrows,
        XG=a8.xg, XQ=a8.xq,
        num_warps=cfg.num_warps, t_ptr=x if tail is None else tail, TAIL_N=tail_n,
        stride_tn=0 if tail is None else tail.stride(0), TAIL=tail is not None, **pdl_kwargs(x),
        xw_ptr=None if xq is None else xq.words, xs_ptr=None if xq is None else xq.scales,
        xsum_ptr=None if xq is None else xq.sums, XPRE=xq is not None, ACT=act,
        **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
    )  # fmt: skip
    return out
