"""Routed int4 experts at decode sizes on tensor cores (Gluon), reading hinfer.quant.int4's row layout directly.

The dense kernel's loop (linear_int4_mma._k_loop, ROWS: each thread loads 16 bytes of rows g and g + 8 of a
16-row stripe, which unpack straight into mma.sync A fragments) over one expert's weight per block of rows:
block b is pair b when the batch has one token or the launch routes its few tokens itself (`DIRECT`: ids[b] is
its expert), else the b-th block of
moe_align's grouping (bexp[b] its expert, -1: nothing to do; sorted[b * BLOCK_M + r] the pairs of its
brows[b] rows). Row r of a block reads x row pair // XDIV (XDIV = top k for gate_up: the pair's token; 1 for down:
the pair's own activation row) and writes y row `pair`, times the pair's routing weight with ROW_SCALE.

    gate_up (ACT): act [P, I] = silu_mul(x[tok] @ Wgu[e]^T) -> down (ROW_SCALE): y [P, H] = act @ Wd[e]^T
    -> sum of slots

Every expert a block names is read once per block (each N tile of it by one program): at one token the 8 selected
experts' bytes once; at 8 tokens each distinct expert once per 8-row block. No split-K by default (the grid is
experts x N tiles already) unless the tile says so: at one token the grid is a few hundred small programs whose loads in
flight are too few to cover DRAM latency, and SPLIT_K programs per tile, each over 1/SPLIT_K of the 128-groups,
put more bytes in flight; their fp32 partials are summed by the last to arrive (linear_splitk's counters).
Reference: hinfer.ops.triton.moe_int4.moe_experts_int4_ref.
"""

from __future__ import annotations

import os

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_int4_mma import (
    GROUP,
    GROUP_K,
    group_partial,
    k_loop,
    loop_terms,
    words_layout,
    x_stage_ptrs,
    x_stage_rows,
    x_stage_shape,
    x_staged_choice,
    x_word_ptrs,
    x_words_layout,
)
from hinfer.ops.triton.linear_splitk import COUNTERS, counter_buffer, split_scratch
from hinfer.ops.triton.mma_common import (
    PROBE_LAST,
    flat_smem,
    iota4,
    mma_layout,
    pdl_start,
    probe_stamp,
    x_stage,
)
from hinfer.ops.triton.moe_int4 import Int4Experts
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.moe import experts_mma_tile

# Decode and speculative verification sizes: (tokens x top k) pairs up to 8 lanes x 4 tokens x (8 + a folded
# shared expert); beyond, the grouped kernels. At 288 pairs this kernel made a 35B-A3B MTP round at 8 lanes
# 18.2 -> 11.9 ms and a 122B-A10B one 44.4 -> 26.8 ms (bench/RESULTS.md). HINFER_MOE_MMA_PAIRS moves the limit.
MAX_PAIRS = 288
SUM_COUNTERS = gl.constexpr(COUNTERS // 2)  # the slot sum's arrival counters (one per N tile) follow the split-K ones


@gluon.jit
def _row_scales(s_ptrs, z_rows, g, sg, HAS_ZERO: gl.constexpr):
    """Group g's scales (fp32) and offsets 128 + z of the tile's rows (scales and zero points `sg` apart a group:
    1 in the row layout [N, G])."""
    s = gl.load(s_ptrs + g * sg).to(gl.float32)
    if HAS_ZERO:
        c = gl.load(z_rows + g * sg).to(gl.float32) + 128.0
    else:
        c = gl.full(s.shape, 136.0, gl.float32, layout=s.type.layout)
    return s, c


@gluon.jit
def _k_loop_words_ring(w_ptrs, s_ptrs, z_rows, sg, x_ptrs, g_lo, g_hi, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                       HAS_ZERO: gl.constexpr, RING: gl.constexpr, GW: gl.constexpr, PDL: gl.constexpr,
                       XS: gl.constexpr = False):  # fmt: skip
    """linear_int4_mma._k_loop (row layout, the ones MMA for the offset) with the words streamed through a
    cp.async ring of RING slots: RING - 1 groups in flight without holding them in registers (the register
    look-ahead's 255 registers kept about seven warps on an SM at eight tokens). Each thread copies and later
    reads back its own 16 bytes a stripe; the barrier a group keeps a slot from being refilled before every
    thread has read it. The scales and zero points stay a group ahead in registers: in the row layout a
    group's are 2-byte values a row apart, too small for cp.async."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    acc, zero, ones = loop_terms(BLOCK_N, BLOCK_M, True)
    last = gl.maximum(g_hi - 1, 0)  # clamped copies re-read the last group (never used) instead of branching
    w_smem = gl.allocate_shared_memory(gl.int32, [RING, BLOCK_N // 16, 2, 32, 4], flat_smem(4))
    for i in gl.static_range(RING - 1):  # the weights go ahead of the PDL wait (nothing writes them)
        async_copy.async_copy_global_to_shared(w_smem.index(i), w_ptrs + gl.minimum(g_lo + i, last) * GW)
        async_copy.commit_group()
    s0, c0 = _row_scales(s_ptrs, z_rows, gl.minimum(g_lo, last), sg, HAS_ZERO)
    pdl_start(PDL)
    if XS:  # x_ptrs are x_stage_ptrs': every group's x in shared memory (k_loop's XS)
        x_ptrs = x_stage(x_ptrs, g_lo)
    for g in range(g_lo, g_hi):
        j = g - g_lo
        async_copy.wait_group(RING - 2)  # this thread's copy of group g has landed
        gl.thread_barrier()  # and every thread has read the slot refilled next (group g - 1's)
        nxt = j + RING - 1
        async_copy.async_copy_global_to_shared(w_smem.index(nxt % RING), w_ptrs + gl.minimum(g_lo + nxt, last) * GW)
        async_copy.commit_group()
        words = w_smem.index(j % RING).load(words_layout(W))
        s1, c1 = _row_scales(s_ptrs, z_rows, gl.minimum(g + 1, last), sg, HAS_ZERO)
        acc = group_partial(acc, words, s0, c0, c0, x_ptrs, g, zero, ones, BLOCK_N, BLOCK_M, DOT_A, DOT_B, True, True,
                            False, XS)  # fmt: skip
        s0, c0 = s1, c1
    async_copy.wait_group(0)
    return acc


# the words' orders (Int4Experts.words): the row layout, or the row words stripe by stripe
WORD_ORDERS = ("rows", "stripes")


@gluon.constexpr_function
def group_words(stripes):
    """Words between one 128-group and the next of a thread's 16 bytes: a row's 16 in the row layout, a stripe's
    256 by stripes."""
    return 2 * GROUP if stripes else GROUP // 8


@gluon.jit
def expert_words(w_ptr, e, stride_e, tile, K, BLOCK_N: gl.constexpr, ACT: gl.constexpr, N,
                 STRIPES: gl.constexpr = False):  # fmt: skip
    """Each thread's 16 bytes of group 0 of expert e's rows in N tile `tile` (stride_e words an expert, an argument
    so that the compiler knows it a multiple of 16): [stripe, 2, lane, 4] int32 in words_layout. The row layout
    (ACT: a stripe's 8 gate rows, then the same 8 columns' up rows, N // 2 further on), or STRIPES (gate_up's rows
    paired so already): a stripe's group 256 contiguous words."""
    LW: gl.constexpr = words_layout(gl.num_warps())
    stripe = tile * (BLOCK_N // 16) + iota4(BLOCK_N // 16, 0, LW)
    lane = iota4(32, 2, LW)
    if STRIPES:
        inner = iota4(2, 1, LW) * 128 + lane * 4 + iota4(4, 3, LW)
        return w_ptr + e.to(gl.int64) * stride_e + stripe.to(gl.int64) * (2 * K) + inner
    if ACT:
        w_rows = stripe * 8 + lane // 4 + iota4(2, 1, LW) * (N // 2)
    else:
        w_rows = stripe * 16 + iota4(2, 1, LW) * 8 + lane // 4
    # a row's K // 8 words written as (K // 32) * 4 so that each thread's 4 words are known 16-byte aligned
    # (K % 128 == 0): one 16-byte load or copy, not two of 8
    return w_ptr + e.to(gl.int64) * stride_e + w_rows.to(gl.int64) * (K // 32 * 4) + (lane % 4) * 4 + iota4(4, 3, LW)


@gluon.jit
def int4_mma_experts_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, tw_ptr, ids_ptr, sorted_ptr, bexp_ptr, brows_ptr, part_ptr, cnt_ptr,
    out_ptr, N, K, P, stride_xm, stride_ym, stride_we, stride_se, stride_sn, stride_om, stride_sg,
    HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, DEPTH: gl.constexpr,
    DIRECT: gl.constexpr, XDIV: gl.constexpr, ROW_SCALE: gl.constexpr,
    PDL: gl.constexpr = False, SPLIT_K: gl.constexpr = 1, SUM: gl.constexpr = False, TOPK: gl.constexpr = 1,
    TOPK_P: gl.constexpr = 1, ACT: gl.constexpr = False, logits_ptr=None, n_experts=0,
    ROUTE: gl.constexpr = 0, BLOCK_E: gl.constexpr = 256, EARLY: gl.constexpr = False, RING: gl.constexpr = 0,
    ROUTE_ONCE: gl.constexpr = True, probe_ptr=None, PROBE: gl.constexpr = False, XA: gl.constexpr = False,
    XG: gl.constexpr = 0, XR: gl.constexpr = 1, STRIPES: gl.constexpr = False,
):  # fmt: skip
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    LX: gl.constexpr = x_words_layout(W)
    if PROBE:  # the timeline (bench/moe_chain_probe.py): entry, waited, expert known, k loop, epilogue, end
        probe_stamp(probe_ptr, 0, gl.program_id(0))
    if not EARLY:  # before the expert ids: the router that writes them may be the kernel just before
        pdl_start(PDL)
    pid_n = gl.program_id(0)
    blk = gl.program_id(1)
    if PROBE:
        probe_stamp(probe_ptr, 1, blk)
    # EARLY (the down after its gate_up): routes again, writing nothing of the route, or reads its blocks, past L1
    e, nrows = block_expert(blk, pid_n, ids_ptr, tw_ptr, bexp_ptr, brows_ptr, logits_ptr, n_experts, DIRECT, ROUTE,
                            BLOCK_E, ROUTE_ONCE, not EARLY, EARLY)  # fmt: skip
    if PROBE:
        probe_stamp(probe_ptr, 2, e)
    if e >= 0:
        # the block's pairs: for x (its layout) and for y (the accumulator's columns); padding rows repeat the
        # last valid pair (their outputs are not stored)
        if XG > 0:  # x staged in shared memory by the loop (linear_int4_mma.x_stage): XR rows, one when DIRECT
            xr = x_stage_rows(XR)
        else:
            xr = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, LX)))
        ym = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, MMA))
        if DIRECT:
            px = xr * 0 + blk
            py = ym * 0 + blk
        else:
            px = fresh_load(sorted_ptr + blk * BLOCK_M + gl.minimum(xr, nrows - 1), EARLY)
            py = fresh_load(sorted_ptr + blk * BLOCK_M + gl.minimum(ym, nrows - 1), EARLY)
        per_split = gl.cdiv(K // GROUP, SPLIT_K)  # this program's 1/SPLIT_K of the 128-groups
        g_lo = gl.program_id(2) * per_split
        g_hi = gl.minimum(g_lo + per_split, K // GROUP)
        if XG > 0:
            x_ptrs = x_stage_ptrs(x_ptr, px // XDIV, stride_xm, g_lo, gl.maximum(g_hi - 1, 0), XG)
        else:
            x_ptrs = x_word_ptrs(x_ptr, px // XDIV, stride_xm, BLOCK_M)

        w_ptrs = expert_words(w_ptr, e, stride_we, pid_n, K, BLOCK_N, ACT, N, STRIPES)
        rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
        cols = rows  # y's column of each tile row
        if ACT:
            cols = pid_n * (BLOCK_N // 2) + (rows % BLOCK_N) // 16 * 8 + rows % 8
            rows = cols + (rows // 8 % 2) * (N // 2)
        s_ptrs = s_ptr + e.to(gl.int64) * stride_se + rows * stride_sn
        z_rows = z_ptr + e.to(gl.int64) * stride_se + rows * stride_sn
        # EARLY: the loop waits (PDL) after issuing its first groups' weights
        if RING:
            acc = _k_loop_words_ring(w_ptrs, s_ptrs, z_rows, stride_sg, x_ptrs, g_lo, g_hi, BLOCK_N, BLOCK_M, HAS_ZERO, RING,
                                     group_words(STRIPES), PDL and EARLY, XG > 0)  # fmt: skip
        else:
            acc = k_loop(w_ptrs, s_ptrs, z_rows, z_rows, stride_sg, x_ptrs, g_lo, g_hi, BLOCK_N, BLOCK_M, HAS_ZERO,
                          True, DEPTH, True, group_words(STRIPES), PDL and EARLY, XA, XG > 0)  # fmt: skip
        if PROBE:
            probe_stamp(probe_ptr, 3, gl.max(gl.max(acc, axis=1), axis=0).to(gl.int32, bitcast=True))
        out_mask = (ym < nrows)[None, :] & (rows < N)[:, None]
        y_off = py[None, :].to(gl.int64) * stride_ym + cols[:, None]
        # partials [SPLIT_K, P, N] fp32 by pair
        wrote = store_split(acc, y_ptr, y_off, tw_ptr, py, out_mask, part_ptr, py[None, :].to(gl.int64) * N + rows[:, None],
                            gl.program_id(2), P * N, cnt_ptr + blk * gl.num_programs(0) + pid_n, SPLIT_K, ROW_SCALE,
                            ACT)  # fmt: skip
        if PROBE:
            probe_stamp(probe_ptr, 4, wrote.to(gl.int32))
        if SUM:
            sum_slots_when_last(wrote, y_ptr, out_ptr, cnt_ptr, pid_n, nrows, N, P, stride_ym, stride_om, TOPK,
                                TOPK_P, BLOCK_N)  # fmt: skip
        if PROBE:
            probe_stamp(probe_ptr, PROBE_LAST, wrote.to(gl.int32))


@gluon.jit
def sum_slots_when_last(wrote, y_ptr, out_ptr, cnt_ptr, pid_n, nrows, N, P, stride_ym, stride_om,
                        TOPK: gl.constexpr, TOPK_P: gl.constexpr, BLOCK_N: gl.constexpr):  # fmt: skip
    """After a block's rows of N tile pid_n are in y (`wrote`): count them in; the last block to finish the tile
    sums every token's slots into out (_sum_slots) and clears the counter."""
    if wrote:
        gl.thread_barrier()  # every thread's rows are written before the release below
        cnt = cnt_ptr + SUM_COUNTERS + pid_n
        if gl.atomic_add(cnt, nrows, sem="acq_rel") + nrows == P:
            _sum_slots(y_ptr, out_ptr, pid_n * BLOCK_N, N, P // TOPK, stride_ym, stride_om, TOPK, TOPK_P, BLOCK_N)
            gl.atomic_xchg(cnt, 0)


@gluon.jit
def store_split(acc, y_ptr, y_off, tw_ptr, py, out_mask, part_ptr, p_off, split, split_stride, cnt,
                SPLIT_K: gl.constexpr, ROW_SCALE: gl.constexpr, ACT: gl.constexpr):  # fmt: skip
    """The block's y rows (_store_rows) from its fp32 accumulator; with K splits each split stores its partial at
    part_ptr + split * split_stride + p_off and the last to arrive (counter `cnt`, cleared after) sums them in
    split order and stores. -> whether this program stored the rows."""
    if SPLIT_K == 1:
        _store_rows(y_ptr, y_off, acc, tw_ptr, py, out_mask, ROW_SCALE, ACT)
        wrote = True
    else:
        gl.store(part_ptr + split * split_stride + p_off, acc, mask=out_mask)
        gl.thread_barrier()  # every thread's partial is written before the release below
        wrote = gl.atomic_add(cnt, 1, sem="acq_rel") == SPLIT_K - 1
        if wrote:
            total = gl.zeros_like(acc)
            for i in gl.static_range(SPLIT_K):
                total += gl.load(part_ptr + i * split_stride + p_off, mask=out_mask, other=0.0, cache_modifier=".cg")
            _store_rows(y_ptr, y_off, total, tw_ptr, py, out_mask, ROW_SCALE, ACT)
            gl.atomic_xchg(cnt, 0)
    return wrote


@gluon.jit
def fresh_load(ptrs, FRESH: gl.constexpr):
    """gl.load, past L1 when FRESH: a launch reading ahead of its PDL wait what an earlier launch wrote, which its
    SM may hold an earlier layer's lines of (the graph reuses the buffers)."""
    if FRESH:
        return gl.load(ptrs, cache_modifier=".cg")
    return gl.load(ptrs)


@gluon.jit
def block_expert(blk, pid_n, ids_ptr, tw_ptr, bexp_ptr, brows_ptr, logits_ptr, n_experts, DIRECT: gl.constexpr,
                 ROUTE: gl.constexpr, BLOCK_E: gl.constexpr, ROUTE_ONCE: gl.constexpr, WRITE: gl.constexpr,
                 FRESH: gl.constexpr = False):  # fmt: skip
    """(expert, rows) of block `blk` of an experts launch (int4 and fp8 alike): with ROUTE > 0 (a few tokens, a block
    per pair) the program routes the pair's token (top ROUTE) itself and takes its slot's expert (pair = token x
    (ROUTE + 1) + slot; the logits' rows are E + 1 long), the programs of N tile 0 writing the slot's id and weight
    for the down launch (WRITE); DIRECT: pair blk's expert from ids; else moe_align's block (expert -1: nothing)."""
    if ROUTE > 0:
        e, w = _route_slot(logits_ptr + (blk // (ROUTE + 1)) * (n_experts + 1), n_experts, blk % (ROUTE + 1), ROUTE,
                           BLOCK_E, ROUTE_ONCE)  # fmt: skip
        if WRITE:
            if (pid_n == 0) & (gl.program_id(2) == 0):
                gl.store(ids_ptr + blk, e.to(gl.int64))
                gl.store(tw_ptr + blk, w.to(tw_ptr.dtype.element_ty))
        nrows = 1
    elif DIRECT:
        e = fresh_load(ids_ptr + blk, FRESH).to(gl.int32)
        nrows = 1
    else:
        e = fresh_load(bexp_ptr + blk, FRESH)
        nrows = fresh_load(brows_ptr + blk, FRESH)
    return e, nrows


@gluon.jit
def _route_slot(logits_ptr, E, slot, TOPK: gl.constexpr, BLOCK_E: gl.constexpr, ONCE: gl.constexpr):
    """(expert, weight) of a token's `slot`: route_slots for one slot."""
    e, w, _, _ = route_slots(logits_ptr, E, slot, slot, TOPK, BLOCK_E, False, ONCE)
    return e, w


@gluon.constexpr_function
def route_layout(block_e, warps):
    """A router row of block_e logits, whole in every warp (the warps' bases zero: replicas, so reductions stay
    in the warp), a thread's experts 32 apart: a warp's load instruction reads 64 contiguous bytes. With 8 adjacent
    experts a thread every instruction touched all the row's sectors, 8x the row from L2, where every program of
    the launch reads the same row at once."""
    regs = [[32 << i] for i in range((block_e // 32).bit_length() - 1)]
    return gl.DistributedLinearLayout(regs, [[1 << i] for i in range(5)], [[0]] * (warps.bit_length() - 1), [],
                                      [block_e])  # fmt: skip


@gluon.jit
def route_slots(logits_ptr, E, slot, slot2, TOPK: gl.constexpr, BLOCK_E: gl.constexpr, TWO: gl.constexpr = True,
                ONCE: gl.constexpr = True):  # fmt: skip
    """(expert, weight) of a token's `slot` and (TWO) of its `slot2` as moe_route.moe_route(shared=True) picks them
    from its E + 1 bf16 logits: the slot-th largest of the first E (ties to the lowest id), weight p / sum of the
    TOPK chosen p (p: softmax over the E), or for slot TOPK the shared expert E weighted sigmoid(logit E). The
    route kernel (moe_route.py) is the Triton form of the same selection. Without TWO the second pair is the
    first's.

    It heads every program of the launch, before its first weight load, so it is written for latency: each warp
    holds the whole row (a 1-D layout its warps replicate: every reduction stays in the warp), each of the TOPK
    maxima is one integer warp reduction over a 32-bit key, and the softmax's row sum cancels out of p / sum p
    (the weight is exp(l - l_max) over the chosen exp(l_j - l_max), the reference's quotient within a few fp32
    ulps), so no float reduction runs at all. Its reads weigh more than its arithmetic, since every program of
    the launch reads the same row at once: unmasked loads (masked with a fill value they went out two at a time),
    64 contiguous bytes a warp instruction, and with ONCE (the default) the row read once a program, a quarter a
    warp, and handed to every warp through shared memory (a layout conversion, one barrier). On an H100 the
    gate_up launch at one token took 15.2 us a layer with the row read 8x over by each warp, 12.9 with it read
    whole by each warp, 12.1 once a program; 11.9 given its experts' ids instead of routing."""
    W: gl.constexpr = gl.num_warps()
    L: gl.constexpr = route_layout(BLOCK_E, W)
    cols = gl.arange(0, BLOCK_E, layout=L)
    ok = cols < E
    # past L1: a launch that routes ahead of its PDL wait reads logits its SM may have cached from an earlier layer
    # unmasked (padding columns read logit E - 1, then drop out of the keys): masked loads with a fill value went
    # out two at a time, each pair after the last had arrived
    if ONCE:  # the program reads the row once (its warps a quarter each); every warp gets it through shared memory
        LW: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])
        c1 = gl.arange(0, BLOCK_E, layout=LW)
        x = gl.convert_layout(gl.load(logits_ptr + gl.minimum(c1, E - 1), cache_modifier=".cg"), L).to(gl.float32)
    else:
        x = gl.load(logits_ptr + gl.minimum(cols, E - 1), cache_modifier=".cg").to(gl.float32)
    g = gl.load(logits_ptr + E, cache_modifier=".cg").to(gl.float32)  # the shared expert's gate, issued alongside
    # one int32 key per expert: a bf16 logit's fp32 bits have 16 zero low bits, so its order-preserving bits (the
    # route kernel's int64 key, upper half) fit the upper 16 and the tie-break BLOCK_E - 1 - id (the lowest id
    # first) the lower; taken or padded experts hold the int32 minimum
    bits = gl.where(x == 0.0, 0.0, x).to(gl.int32, bitcast=True)
    key = ((bits ^ ((bits >> 31) & 0x7FFFFFFF)) & -65536) | (BLOCK_E - 1 - cols)
    key = gl.where(ok, key, -2147483648)
    m = 0.0
    p_sum = 0.0
    p_sel = 0.0
    i_sel = 0
    p_sel2 = 0.0
    i_sel2 = 0
    for j in gl.static_range(TOPK):
        best = gl.max(key, axis=0)
        key = gl.where(key == best, -2147483648, key)  # the chain: one reduction and one select a maximum
        idx = BLOCK_E - 1 - (best & 0xFFFF)
        hi = best & -65536
        hi = hi | ((hi >> 31) & 0xFFFF)  # the order-preserving bits whole again (a negative logit's low ones set)
        v = (hi ^ ((hi >> 31) & 0x7FFFFFFF)).to(gl.float32, bitcast=True)
        if j == 0:
            m = v  # the largest logit, the softmax's shift
        p = gl.exp(v - m)
        p_sum += p
        p_sel = gl.where(slot == j, p, p_sel)
        i_sel = gl.where(slot == j, idx, i_sel)
        if TWO:
            p_sel2 = gl.where(slot2 == j, p, p_sel2)
            i_sel2 = gl.where(slot2 == j, idx, i_sel2)
    shared_w = 1.0 / (1.0 + gl.exp(-g))  # the shared expert: its gate rounded to the logits' dtype first, as the reference's is
    e = gl.where(slot == TOPK, E, i_sel)
    w = gl.where(slot == TOPK, shared_w, p_sel / p_sum)
    e2 = e
    w2 = w
    if TWO:
        e2 = gl.where(slot2 == TOPK, E, i_sel2)
        w2 = gl.where(slot2 == TOPK, shared_w, p_sel2 / p_sum)
    return e, w, e2, w2


@gluon.jit
def _sum_slots(y_ptr, out_ptr, col0, N, T, stride_ym, stride_om, TOPK: gl.constexpr, TOPK_P: gl.constexpr,
               BLOCK_N: gl.constexpr):  # fmt: skip
    """out[t, cols] = sum over the slots s of y[t * TOPK + s, cols] in fp32 (moe_gemm._sum_slots_kernel's sum)
    for the N tile at col0, every token: y rows written by other programs, read past L1."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, gl.num_warps()], [1, 0])
    s = gl.arange(0, TOPK_P, layout=gl.SliceLayout(1, L))
    c = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, L))
    mask = (s < TOPK)[:, None] & (c < N)[None, :]
    for t in range(T):
        ptrs = y_ptr + (t * TOPK + s).to(gl.int64)[:, None] * stride_ym + c[None, :]
        v = gl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(gl.float32)
        gl.store(out_ptr + t * stride_om + c, gl.sum(v, axis=0).to(gl.bfloat16), mask=c < N)


@gluon.jit
def _store_rows(y_ptr, y_off, acc, tw_ptr, py, out_mask, ROW_SCALE: gl.constexpr, ACT: gl.constexpr):
    """y rows of the block's pairs (times their routing weights with ROW_SCALE), in bf16; with ACT silu(gate) *
    up of the tile's paired rows instead (half as many columns)."""
    if ROW_SCALE:
        acc = acc * gl.load(tw_ptr + py).to(gl.float32)[None, :]
    if ACT:
        gate, up = _stripe_halves(acc)
        gate = gate.to(gl.bfloat16).to(gl.float32)
        act = (gate / (1.0 + gl.exp(-gate))).to(gl.bfloat16).to(gl.float32)  # activation.silu_mul's rounding
        y = (act * up.to(gl.bfloat16).to(gl.float32)).to(gl.bfloat16)
        y_off, _ = _stripe_halves(y_off)
        ok, _ = _stripe_halves(out_mask.to(gl.int32))
        gl.store(y_ptr + y_off, y, mask=ok != 0)
    else:
        gl.store(y_ptr + y_off, acc.to(gl.bfloat16), mask=out_mask)


@gluon.jit
def _stripe_halves(t):
    """[BLOCK_N, BLOCK_M] in the MMA layout -> its rows 0-7 and 8-15 of every 16-row stripe, each [BLOCK_N // 16,
    8, BLOCK_M]: a thread holds rows g and g + 8 of a stripe, so this only renames registers."""
    n: gl.constexpr = t.shape[0]
    m: gl.constexpr = t.shape[1]
    return gl.split(gl.permute(gl.reshape(t, [n // 16, 2, 8, m]), [0, 2, 3, 1]))


def route_read_once() -> bool:
    """How a launch that routes its token reads the router row (HINFER_ROUTE_READ, read at every call): `once` (the
    default) the program reads it once and its warps share it through shared memory (a quarter of the L2
    requests on the one row every program reads at once, for a barrier: one-lane decode +1.4% on an H100),
    `warps` every warp reads the whole row."""
    v = os.environ.get("HINFER_ROUTE_READ", "once").strip()
    if v not in ("warps", "once"):
        raise ValueError(f"HINFER_ROUTE_READ must be `warps` or `once`, got {v!r}")
    return v == "once"


def experts_mma_variant(block_n: int, block_m: int, warps: int, zero: bool, direct: bool, xdiv: int,
                        row_scale: bool, depth: int = 2, pdl: bool = False,
                        split: int = 1, topk: int = 0, act: bool = False,
                        route: int = 0, early: bool = False, ring: int = 0, xg: int = 0, xr: int = 1,
                        words: str = "rows"):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot); `route`: the
    top k of a launch that routes its token itself; `early`: its weights ahead of the PDL wait; `words`: one of
    WORD_ORDERS."""
    if words not in WORD_ORDERS:
        raise ValueError(f"int4 mma experts: words in {WORD_ORDERS}, got {words!r}")
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*u8" if zero else "*bf16",
           "y_ptr": "*bf16", "tw_ptr": "*fp32", "ids_ptr": "*i64", "sorted_ptr": "*i32", "bexp_ptr": "*i32",
           "brows_ptr": "*i32", "part_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16", "N": "i32", "K": "i32",
           "P": "i32", "stride_xm": "i32", "stride_ym": "i32", "stride_we": "i32", "stride_se": "i32",
           "stride_sn": "i32", "stride_om": "i32", "logits_ptr": "*bf16", "n_experts": "i32"}  # fmt: skip
    cex = dict(HAS_ZERO=zero, BLOCK_N=block_n, BLOCK_M=block_m, DEPTH=depth, DIRECT=direct, XDIV=xdiv,
               ROW_SCALE=row_scale, PDL=pdl, SPLIT_K=split, SUM=topk > 0, TOPK=max(topk, route, 1),
               TOPK_P=1 << (max(topk, 1) - 1).bit_length(), ACT=act, ROUTE=route, BLOCK_E=256, EARLY=early,
               RING=ring, XG=xg, XR=xr, stride_sg=1, STRIPES=words == "stripes")  # fmt: skip
    name = (f"int4 mma experts{' asym' if zero else ''}{' direct' if direct else ''} BLOCK_N={block_n} "
            f"BLOCK_M={block_m} w{warps} xdiv {xdiv}{' scaled' if row_scale else ''}{' pdl' if pdl else ''}{f' split {split}' if split > 1 else ''}{f' sum {topk}' if topk else ''}{' act' if act else ''}{f' route {route}' if route else ''}{' early' if early else ''}{f' ring {ring}' if ring else ''}{f' x staged {xg}x{xr}' if xg else ''}{f' {words}' if words != 'rows' else ''}")  # fmt: skip
    return name, int4_mma_experts_kernel, sig, cex, warps


def experts_mma(
    x: torch.Tensor, w: Int4Experts, y: torch.Tensor, blocks: int, block_m: int, ids: torch.Tensor,
    sorted_: torch.Tensor, bexp: torch.Tensor, brows: torch.Tensor, direct: bool, xdiv: int,
    tw: torch.Tensor | None = None, cfg: SkinnyConfig | None = None,
    sum_out: torch.Tensor | None = None, topk: int = 1, act: bool = False, route: torch.Tensor | None = None,
    route_w: torch.Tensor | None = None, early: bool = False, probe: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y[pair] = x[pair // xdiv] @ w[expert]^T (times tw[pair] if given) for every pair the blocks name.
    With `sum_out` [T, N] the launch also sums each token's `topk` slots (pair = t * topk + s) into it: the last
    program to finish an N tile does (moe_gemm._sum_slots_kernel's sum, one launch fewer). With `act` w's rows
    are [gate | up] (2 x N / 2) and y [P, N / 2] gets silu(gate) * up (as activation.silu_mul): each tile pairs 8
    gate rows with their 8 up rows per 16-row stripe, so one thread holds both. With `route` (T tokens' router
    logits [T, E + 1], the last of a row the shared expert's gate; direct blocks, one per pair: pair = token x
    (topk + 1) + slot) the launch routes each token as moe_route(..., topk, shared=True) does and writes each
    pair's expert into `ids` and its weight into `route_w` (the route kernel's launch saved). With `route` and `early` (the down after such a gate_up) it routes
    the token again, writes nothing of it, and issues its first groups of weights before its PDL wait: the
    logits come from the kernel before the gate_up, so they are complete once the gate_up lets this launch start
    (every gate_up program waits before it lets dependents launch), and the weights' DRAM trip overlaps the
    gate_up's tail. `early` without `route`: the blocks (ids, or sorted / bexp / brows) come from a launch before
    the previous one (moe_align, the route kernel), so they are complete too, and the launch reads them (past L1)
    and issues its first groups of weights before its wait in the same way (`down_early`). `cfg` overrides the
    tile table (sweeps; the table's tile stages x in shared memory as HINFER_X_STAGED says: by default where a
    block is one pair, linear_int4_mma.x_staged_choice). `probe` (int64
    [programs, PROBE_POINTS]) takes each program's timeline (mma_common.probe_stamp; bench/moe_chain_probe.py).
    The scales and zero points are read by their strides: the model's [E, N, G], or the same values stored
    group-major (bench/experts_mma_tiles.py --layout groups); the words in the order `w.words` names (--layout
    stripes)."""
    e, n, k = w.shape
    if k % GROUP_K or n % 64 or x.dtype != torch.bfloat16 or x.stride(-1) != 1:
        raise ValueError(f"int4 mma experts: K % {GROUP_K}, N % 64, bf16 x with unit stride; got {w.shape}")
    if x.stride(0) % 2:  # the kernel reads x's rows as bf16 pairs
        x = x.contiguous()
    if act and (tw is not None or sum_out is not None or y.shape[-1] != n // 2):
        raise ValueError(f"int4 mma experts: silu(gate) * up into {n // 2} columns, alone; got y {tuple(y.shape)}")
    slots = blocks // route.shape[0] if route is not None else 1  # a routed token's slots: its top k + shared
    if route is not None and (not direct or blocks != route.shape[0] * slots or route.dtype != torch.bfloat16
                              or not route.is_contiguous() or route.shape[1] - 1 > 1024
                              or not early and (slots != topk + 1 or route_w is None)):  # fmt: skip
        raise ValueError(f"int4 mma experts: routing {route.shape[0]} tokens into {topk} + 1 direct slots each, "
                         f"got {blocks} blocks")  # fmt: skip
    cfg = cfg or x_staged_choice(experts_mma_tile(ids.numel(), n, k, blocks), k, direct)
    if (n % cfg.block_n or cfg.block_n % (16 * cfg.num_warps) or cfg.num_stages not in (2, 4)
            or not 1 <= cfg.split_k <= k // GROUP_K or cfg.ring == 1 or (cfg.x_staged and cfg.x_ahead)):  # fmt: skip
        raise ValueError(f"int4 mma experts: tile {cfg} does not fit N = {n}, K = {k} (16-row stripes per warp, "
                         "depth 2 or 4, at least one 128-group per split, a ring of 0 or >= 2 slots)")  # fmt: skip
    block_n, warps, depth, split = cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.split_k
    xg, xr = x_stage_shape(cfg, k, direct)
    if w.zeros is not None and w.zeros.stride() != w.scales.stride():
        raise ValueError("int4 mma experts: zero points laid out as the scales (the kernel reads both by their strides)")
    pairs = y.shape[0]
    if blocks * (n // block_n) > COUNTERS // 2 or (sum_out is not None and pairs % topk):
        raise ValueError(f"int4 mma experts: {blocks} blocks x {n // block_n} tiles, {pairs} pairs of {topk} slots")
    part, cnt = split_scratch(split, pairs, n, blocks * (n // block_n), x, y)
    if sum_out is not None:
        cnt = counter_buffer(x.device)
    out = sum_out if sum_out is not None else y
    int4_mma_experts_kernel[(n // block_n, blocks, split)](
        x, w.qweight, w.scales, w.zeros if w.zeros is not None else w.scales, y,
        tw if tw is not None else route_w if route is not None else x,
        ids, sorted_, bexp, brows, part, cnt, out, n, k, pairs, x.stride(0), y.stride(0), w.qweight.stride(0),
        w.scales.stride(0), w.scales.stride(1), out.stride(0), w.scales.stride(2),
        HAS_ZERO=w.zeros is not None, BLOCK_N=block_n, BLOCK_M=block_m, DEPTH=depth, DIRECT=direct, XDIV=xdiv,
        ROW_SCALE=tw is not None, SPLIT_K=split, SUM=sum_out is not None, TOPK=topk,
        TOPK_P=1 << (topk - 1).bit_length(), ACT=act, num_warps=warps,
        logits_ptr=route, n_experts=0 if route is None else route.shape[1] - 1,
        ROUTE=slots - 1 if route is not None else 0, EARLY=early, RING=cfg.ring, ROUTE_ONCE=route_read_once(),
        probe_ptr=probe, PROBE=probe is not None, XA=cfg.x_ahead and not cfg.ring, XG=xg, XR=xr,
        STRIPES=w.words == "stripes",
        BLOCK_E=triton.next_power_of_2(route.shape[1] - 1) if route is not None else 256, **pdl_kwargs(x),
        **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
    )  # fmt: skip
    return y
