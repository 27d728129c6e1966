"""Routed fp8 (e4m3, W8A16) experts at decode sizes on tensor cores (Gluon), reading Fp8Experts' row-major bytes.

The dense fp8 kernel's loop (linear_fp8_mma._k_loop: each thread loads 16 bytes of rows g and g + 8 of a 16-row
stripe at two K offsets of a group, which become bf16 A fragments by the e4m3 bit trick, the weights DEPTH - 1
groups ahead in registers) over one expert's weight per block of rows, the blocks as the int4 experts kernel
(moe_int4_mma) names them: block b is pair b when DIRECT (one token: its k experts are distinct), else the b-th
block of moe_align's grouping (bexp[b] its expert, -1: nothing to do; sorted[b * BLOCK_M + r] the pairs of its
brows[b] rows). Row r of a block reads x row pair // XDIV (XDIV = top k for gate_up, 1 for down) and writes y row
`pair`; the epilogue is moe_int4_mma's (store_split: SiLU-mul of the paired gate / up rows with ACT, times the
pair's routing weight with ROW_SCALE, the split-K partials summed by the last program to arrive, and with SUM
the token's slots summed by the last program to finish an N tile).

    gate_up (ACT): act [P, I] = silu_mul(x[tok] @ (Wgu[e] * s)^T) -> down (ROW_SCALE, SUM): out [T, H]

Scales: per row (fp32 [E, N]) multiply the fp32 accumulator once, before the epilogue (the SiLU-mul and the split
sum are taken on scaled values, as the reference's); 128 x 128 blocks (fp32 [E, N / 128, K / 128]) each group's
partial in the loop. Reference: moe.moe_experts' reference body (hinfer.ops.moe), which dequantizes one expert at
a time and computes in fp32.
"""

from __future__ import annotations

import os

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from hinfer.ops.triton.common import GROUP as GROUP_K
from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_fp8_mma import (
    _iota5,
    _k_loop,
    _words_layout,
    _x_words_layout,
    x_stage_ptrs,
    x_stage_rows,
)
from hinfer.ops.triton.linear_int4_mma import x_stage_shape
from hinfer.ops.triton.linear_splitk import COUNTERS, counter_buffer, split_scratch
from hinfer.ops.triton.mma_common import mma_layout, pdl_start, split_groups
from hinfer.ops.triton.moe_int4_mma import block_expert, route_read_once, store_split, sum_slots_when_last
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.moe import fp8_experts_mma_tile

MAX_PAIRS = 288  # as the int4 experts kernel: decode and verification sizes; beyond, the grouped kernels


@gluon.jit
def _x_word_ptrs(x_ptr, px, stride_xm, XDIV: gl.constexpr):
    """x's words [BLOCK_M, t, h, j] of each tile column's row px // XDIV (the dense kernel's x layout: row g's
    words 32 h + 8 t + j of a group)."""
    LX: gl.constexpr = _x_words_layout(gl.num_warps())
    xt = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, LX))))
    xh = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, LX))))
    xj = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, LX))))
    rows = (px // XDIV).to(gl.int64) * (stride_xm // 2)
    return (x_ptr.to(gl.pointer_type(gl.int32), bitcast=True) + rows[:, None, None, None]
            + xt[None, :, None, None] * 8 + xh[None, None, :, None] * 32 + xj[None, None, None, :])  # fmt: skip


@gluon.jit
def _expert_word_ptrs(w_ptr, e, stride_we, tile, N, K, BLOCK_N: gl.constexpr, ACT: gl.constexpr):
    """Each thread's words of group 0 of expert e's rows in N tile `tile`, [stripe, r3, lane, h, w] in the dense
    kernel's words layout (row 16 stripe + 8 r3 + lane // 4). ACT: a stripe's 8 gate rows (r3 = 0), then the same 8
    columns' up rows (r3 = 1, N // 2 further on), so that one thread holds both for the SiLU-mul."""
    LW: gl.constexpr = _words_layout(gl.num_warps())
    S: gl.constexpr = BLOCK_N // 16
    lane = _iota5(32, 2, LW)
    stripe = tile * S + _iota5(S, 0, LW)
    if ACT:
        w_rows = stripe * 8 + lane // 4 + _iota5(2, 1, LW) * (N // 2)
    else:
        w_rows = stripe * 16 + _iota5(2, 1, LW) * 8 + lane // 4
    return (w_ptr + e.to(gl.int64) * stride_we + w_rows.to(gl.int64) * (K // 4) + _iota5(2, 3, LW) * 16
            + (lane % 4) * 4 + _iota5(4, 4, LW))  # fmt: skip


@gluon.jit
def fp8_mma_experts_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, tw_ptr, ids_ptr, sorted_ptr, bexp_ptr, brows_ptr, part_ptr, cnt_ptr, out_ptr,
    N, K, P, stride_xm, stride_ym, stride_we, stride_se, stride_sn, stride_om,
    BLOCKED: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, DEPTH: gl.constexpr,
    DIRECT: gl.constexpr, XDIV: gl.constexpr, ROW_SCALE: gl.constexpr, PDL: gl.constexpr = False,
    SPLIT_K: gl.constexpr = 1, SUM: gl.constexpr = False, TOPK: gl.constexpr = 1, TOPK_P: gl.constexpr = 1,
    ACT: gl.constexpr = False, XG: gl.constexpr = 0, XR: gl.constexpr = 1, logits_ptr=None, n_experts=0,
    ROUTE: gl.constexpr = 0, BLOCK_E: gl.constexpr = 256, ROUTE_ONCE: gl.constexpr = True,
):  # fmt: skip
    """XG > 0: the program's XG groups of x (XR rows: 1 where a block is one pair) staged in shared memory after the
    wait (linear_fp8_mma.x_stage). ROUTE > 0 (a gate_up, a block per pair): the program routes its pair's token
    from the router logits as the int4 experts' gate_up does (moe_int4_mma.block_expert)."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    LX: gl.constexpr = _x_words_layout(W)
    pdl_start(PDL)  # the expert ids and x come from the kernels before
    pid_n = gl.program_id(0)
    blk = gl.program_id(1)
    e, nrows = block_expert(blk, pid_n, ids_ptr, tw_ptr, bexp_ptr, brows_ptr, logits_ptr, n_experts, DIRECT, ROUTE,
                            BLOCK_E, ROUTE_ONCE, True)  # fmt: skip
    if e >= 0:
        # the block's pairs, for x (its layout) and for y (the accumulator's columns); padding rows repeat the last
        # valid pair (their outputs are not stored)
        xr = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, LX))))
        ym = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, MMA))
        if DIRECT:
            px = xr * 0 + blk
            py = ym * 0 + blk
        else:
            px = gl.load(sorted_ptr + blk * BLOCK_M + gl.minimum(xr, nrows - 1))
            py = gl.load(sorted_ptr + blk * BLOCK_M + gl.minimum(ym, nrows - 1))
        g_lo, g_hi = split_groups(K, SPLIT_K, gl.program_id(2))
        if XG > 0:  # the staged rows: the block's pairs' (one where DIRECT), in the staging layout
            sr = x_stage_rows(XR)
            if DIRECT:
                ps = sr * 0 + blk
            else:
                ps = gl.load(sorted_ptr + blk * BLOCK_M + gl.minimum(sr, nrows - 1))
            x_ptrs = x_stage_ptrs(x_ptr, ps // XDIV, stride_xm, g_lo, gl.maximum(g_hi - 1, 0), XG)
        else:
            x_ptrs = _x_word_ptrs(x_ptr, px, stride_xm, XDIV)
        w_ptrs = _expert_word_ptrs(w_ptr, e, stride_we, pid_n, N, K, BLOCK_N, ACT)
        rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
        cols = rows  # y's column of each tile row
        if ACT:
            cols = pid_n * (BLOCK_N // 2) + (rows % BLOCK_N) // 16 * 8 + rows % 8
            rows = cols + (rows // 8 % 2) * (N // 2)
        if BLOCKED:  # [E, N / 128, K / 128]: the loop adds the group
            s_ptrs = s_ptr + e.to(gl.int64) * stride_se + (rows // 128) * stride_sn
        else:  # [E, N]
            s_ptrs = s_ptr + e.to(gl.int64) * stride_se + rows
        acc = _k_loop(w_ptrs, s_ptrs, x_ptrs, g_lo, g_hi, BLOCK_N, BLOCK_M, BLOCKED, DEPTH, False, XG > 0)
        if not BLOCKED:
            acc = acc * gl.load(s_ptrs)[:, None]
        out_mask = (ym < nrows)[None, :] & (rows < N)[:, None]
        y_off = py[None, :].to(gl.int64) * stride_ym + cols[:, None]
        wrote = store_split(acc, y_ptr, y_off, tw_ptr, py, out_mask, part_ptr,
                            py[None, :].to(gl.int64) * N + rows[:, None], gl.program_id(2), P * N,
                            cnt_ptr + blk * gl.num_programs(0) + pid_n, SPLIT_K, ROW_SCALE, ACT)  # fmt: skip
        if SUM:
            sum_slots_when_last(wrote, y_ptr, out_ptr, cnt_ptr, pid_n, nrows, N, P, stride_ym, stride_om, TOPK,
                                TOPK_P, BLOCK_N)  # fmt: skip


def fp8_mma_experts_fit(x: torch.Tensor, n_gu: int, h: int, n_dn: int, i: int, pairs: int) -> bool:
    """Decode sizes on a GPU (`HINFER_MOE_FP8`, read at every call: `mma`, the default, or `grouped` for the grouped
    Triton kernels at every size): bf16 x, whole 64-row tiles and 128-groups, up to MAX_PAIRS (token, expert) pairs."""
    if os.environ.get("HINFER_MOE_FP8", "mma") != "mma" or not x.is_cuda:
        return False
    return (pairs <= MAX_PAIRS and x.dtype == torch.bfloat16 and n_gu % 64 == 0 and n_dn % 64 == 0
            and h % GROUP_K == 0 and i % GROUP_K == 0)  # fmt: skip


def fp8_experts_variant(block_n: int, warps: int, blocked: bool, direct: bool, xdiv: int, row_scale: bool,
                        depth: int = 4, pdl: bool = False, split: int = 1, topk: int = 0, act: bool = False,
                        max_regs: int = 0, xg: int = 0, xr: int = 1, route: int = 0):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot)."""
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*fp32", "y_ptr": "*bf16", "tw_ptr": "*fp32",
           "ids_ptr": "*i64", "sorted_ptr": "*i32", "bexp_ptr": "*i32", "brows_ptr": "*i32", "part_ptr": "*fp32",
           "cnt_ptr": "*i32", "out_ptr": "*bf16", "N": "i32", "K": "i32", "P": "i32", "stride_xm": "i32",
           "stride_ym": "i32", "stride_we": "i32", "stride_se": "i32", "stride_sn": "i32", "stride_om": "i32"}  # fmt: skip
    if route:
        sig |= {"logits_ptr": "*bf16", "n_experts": "i32"}
    cex = dict(BLOCKED=blocked, BLOCK_N=block_n, BLOCK_M=8, DEPTH=depth, DIRECT=direct, XDIV=xdiv,
               ROW_SCALE=row_scale, PDL=pdl, SPLIT_K=split, SUM=topk > 0, TOPK=max(topk, 1),
               TOPK_P=1 << (max(topk, 1) - 1).bit_length(), ACT=act, maxnreg=max_regs, XG=xg, XR=xr, ROUTE=route,
               BLOCK_E=256)  # fmt: skip
    name = (f"fp8 mma experts{' block' if blocked else ''}{' direct' if direct else ''} BLOCK_N={block_n} "
            f"w{warps} depth {depth} xdiv {xdiv}{' scaled' if row_scale else ''}{' pdl' if pdl else ''}"
            f"{f' split {split}' if split > 1 else ''}{f' sum {topk}' if topk else ''}{' act' if act else ''}"
            f"{f' route {route}' if route else ''}{f' x staged {xg}x{xr}' if xg else ''}"
            f"{f' maxnreg {max_regs}' if max_regs else ''}")  # fmt: skip
    return name, fp8_mma_experts_kernel, sig, cex, warps


def fp8_experts_mma(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, blocked: bool, y: torch.Tensor, blocks: int,
    block_m: int, ids: torch.Tensor, sorted_: torch.Tensor, bexp: torch.Tensor, brows: torch.Tensor, direct: bool,
    xdiv: int, tw: torch.Tensor | None = None, cfg: SkinnyConfig | None = None,
    sum_out: torch.Tensor | None = None, topk: int = 1, act: bool = False, route: torch.Tensor | None = None,
    route_w: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y[pair] = x[pair // xdiv] @ (weight[expert] * scale)^T (times tw[pair] if given) for every pair the blocks
    name: weight e4m3 [E, N, K], scale fp32 [E, N] or (blocked) [E, N / 128, K / 128]. `sum_out`, `topk` and `act`
    as moe_int4_mma.experts_mma: the down launch summing each token's slots into sum_out [T, N], the gate_up one
    writing silu(gate) * up into y [P, N / 2] (weight rows [gate | up]). `cfg` overrides the tile table
    (tiles/moe.py's moe_fp8_mma family: sweeps). With `route` (a gate_up over T tokens' router logits [T, E + 1],
    the last of a row the shared expert's gate; a block per pair: pair = token x (topk + 1) + slot) the launch
    routes each token as moe_route(..., topk, shared=True) does and writes each pair's expert into `ids` and its
    weight into `route_w` (the route kernel's launch saved), as moe_int4_mma.experts_mma does."""
    e, n, k = weight.shape
    if k % GROUP_K or n % 32 or x.dtype != torch.bfloat16 or x.stride(-1) != 1 or block_m != 8:
        raise ValueError(f"fp8 mma experts: K % {GROUP_K}, N % 32, bf16 x with unit stride, 8-row blocks; got "
                         f"{tuple(weight.shape)}")  # fmt: skip
    if weight.dtype != torch.float8_e4m3fn or not weight.is_contiguous() or scale.dtype != torch.float32:
        raise ValueError("fp8 mma experts: contiguous e4m3 weights and fp32 scales")
    want = (e, -(-n // GROUP_K), k // GROUP_K) if blocked else (e, n)
    if tuple(scale.shape) != want or scale.stride(-1) != 1:
        raise ValueError(f"fp8 mma experts: scales {tuple(scale.shape)}, expected {want} with unit last stride")
    if x.stride(0) % 2:  # the kernel reads x's rows as bf16 pairs
        x = x.contiguous()
    if act and (tw is not None or sum_out is not None or y.shape[-1] != n // 2):
        raise ValueError(f"fp8 mma experts: silu(gate) * up into {n // 2} columns, alone; got y {tuple(y.shape)}")
    slots = blocks // route.shape[0] if route is not None else 1  # a routed token's slots: its top k + shared
    if route is not None and (not direct or not act or blocks != route.shape[0] * slots or slots != topk + 1
                              or route.dtype != torch.bfloat16 or not route.is_contiguous()
                              or route.shape[1] - 1 > 1024 or route_w is None):  # fmt: skip
        raise ValueError(f"fp8 mma experts: a gate_up routing {route.shape[0]} tokens into {topk} + 1 direct slots "
                         f"each, got {blocks} blocks")  # fmt: skip
    cfg = cfg or fp8_experts_mma_tile(ids.numel(), n, k, blocks)
    if (n % cfg.block_n or cfg.block_n % (16 * cfg.num_warps) or cfg.num_stages not in (2, 4)
            or not 1 <= cfg.split_k <= k // GROUP_K):  # fmt: skip
        raise ValueError(f"fp8 mma experts: tile {cfg} does not fit N = {n}, K = {k}")
    xg, xr = x_stage_shape(cfg, k, direct)  # where the tile says x_staged (none packaged: sweeps try it)
    pairs = y.shape[0]
    tiles = n // cfg.block_n
    if blocks * tiles > COUNTERS // 2 or (sum_out is not None and pairs % topk):
        raise ValueError(f"fp8 mma experts: {blocks} blocks x {tiles} tiles, {pairs} pairs of {topk} slots")
    part, cnt = split_scratch(cfg.split_k, pairs, n, blocks * tiles, x, y)
    if sum_out is not None:
        cnt = counter_buffer(x.device)
    out = sum_out if sum_out is not None else y
    w = weight.view(torch.int32)  # [E, N, K / 4]: the kernel reads 16 bytes of a row at a time
    fp8_mma_experts_kernel[(tiles, blocks, cfg.split_k)](
        x, w, scale, y, tw if tw is not None else route_w if route is not None else x, ids, sorted_, bexp, brows,
        part, cnt, out,
        n, k, pairs, x.stride(0), y.stride(0), w.stride(0), scale.stride(0), scale.stride(1) if blocked else 0,
        out.stride(0),
        BLOCKED=blocked, BLOCK_N=cfg.block_n, BLOCK_M=block_m, DEPTH=cfg.num_stages, DIRECT=direct, XDIV=xdiv,
        ROW_SCALE=tw is not None, SPLIT_K=cfg.split_k, SUM=sum_out is not None, TOPK=topk,
        TOPK_P=1 << (topk - 1).bit_length(), ACT=act, XG=xg, XR=xr, num_warps=cfg.num_warps, logits_ptr=route,
        n_experts=0 if route is None else route.shape[1] - 1, ROUTE=slots - 1 if route is not None else 0,
        BLOCK_E=triton.next_power_of_2(route.shape[1] - 1) if route is not None else 256,
        ROUTE_ONCE=route_read_once(), **pdl_kwargs(x),
        **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
    )  # fmt: skip
    return y
