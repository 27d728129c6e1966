"""Router: softmax over the experts (fp32), top-k, renormalise — one program per BLOCK_T tokens.

Selection runs on the fp32 logits, not on the probabilities: softmax is monotone, so the chosen set is the same,
and equal logits give exactly equal probabilities in any implementation, so the kernel never depends on the
accuracy of its exp (the GPU's is approximate). Ties (equal logits) go to the lowest expert id first, slot
by slot in descending order. torch.topk leaves the order among equal values unspecified (the CPU kernel is a
partial sort), so with ties at the k-th place the reference may pick another expert of the same weight.
The weights are p_j / sum(p_selected) with p = exp(x - max) / sum(exp(x - max)), as in the reference.
SHARED: the logits' last column is a shared expert's gate (hinfer.model.shared_expert_fold): excluded from the
softmax, it becomes one more slot, weight sigmoid(logit) and id E.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start, round_to
from hinfer.ops.triton.linear_splitk import COUNTERS, counter_buffer
from hinfer.ops.triton.moe_common import _empty


@triton.jit
def _route_kernel(
    logits_ptr, w_ptr, ids_ptr, T, E, stride_t,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, EMU: tl.constexpr,
    PDL: tl.constexpr, SHARED: tl.constexpr = False,
):  # fmt: skip
    pdl_start(PDL)
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < T
    col_ok = cols < E
    ptrs = logits_ptr + rows.to(tl.int64)[:, None] * stride_t + cols[None, :]
    x = tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=float("-inf")).to(tl.float32)
    g = tl.zeros([BLOCK_T], dtype=tl.float32)
    if SHARED:  # the gate of the shared expert, in the logits' dtype as the reference's
        g = tl.load(logits_ptr + rows.to(tl.int64) * stride_t + E, mask=row_ok, other=0.0).to(tl.float32)
    _route_rows(x, g, rows, row_ok, cols, col_ok, w_ptr, ids_ptr, E, TOPK, TOPK_P, BLOCK_T, BLOCK_E, EMU, SHARED)


@triton.jit
def _route_rows(
    x, g, rows, row_ok, cols, col_ok, w_ptr, ids_ptr, E,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, EMU: tl.constexpr,
    SHARED: tl.constexpr,
):  # fmt: skip
    """Route the fp32 logits x [BLOCK_T, BLOCK_E] (columns past E at -inf) of token rows `rows`: weights and ids
    of the top k (and of the shared expert, gate logit g, with SHARED) to w_ptr / ids_ptr."""
    x = tl.where(row_ok[:, None] | ~col_ok[None, :], x, 0.0)  # rows past T: finite, no NaN from -inf - -inf
    # one int64 key per expert: the logit's bits made order-preserving as an int (an involution; -0 folded
    # into +0 first so that equal logits stay equal) above BLOCK_E - 1 - id, so one max picks the largest logit
    # and, among equal ones, the lowest id; taken or padded experts hold the int64 minimum (below every key)
    bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    key = ((bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) << 32) | (BLOCK_E - 1 - cols).to(tl.int64)[None, :]
    taken = tl.full([BLOCK_T, BLOCK_E], -9223372036854775807 - 1, tl.int64)
    key = tl.where(col_ok[None, :] & (rows >= 0)[:, None], key, taken)

    slots = tl.arange(0, TOPK_P)
    top_k32 = tl.zeros([BLOCK_T, TOPK_P], dtype=tl.int32)
    top_i = tl.zeros([BLOCK_T, TOPK_P], dtype=tl.int32)
    for j in tl.static_range(TOPK):
        best = tl.max(key, axis=1)
        idx = BLOCK_E - 1 - (best & 0xFFFFFFFF).to(tl.int32)
        top_k32 = tl.where(slots[None, :] == j, (best >> 32).to(tl.int32)[:, None], top_k32)
        top_i = tl.where(slots[None, :] == j, idx[:, None], top_i)
        key = tl.where(cols[None, :] == idx[:, None], taken, key)
    top_x = (top_k32 ^ ((top_k32 >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)  # the chosen logits
    m = tl.sum(tl.where(slots[None, :] == 0, top_x, 0.0), axis=1)  # slot 0's: the row's largest logit
    ex = tl.where(col_ok[None, :], tl.exp(x - m[:, None]), 0.0)
    # p_j = exp(x_j - m) / sum exp(x - m), the same operations on the same values as softmax's entry j
    top_p = tl.where((slots < TOPK)[None, :], tl.exp(top_x - m[:, None]) / tl.sum(ex, axis=1)[:, None], 0.0)
    top_w = top_p / tl.sum(top_p, axis=1)[:, None]
    OUT_K: tl.constexpr = TOPK + SHARED
    out_mask = row_ok[:, None] & (slots < TOPK)[None, :]
    out_off = rows.to(tl.int64)[:, None] * OUT_K + slots[None, :]
    tl.store(w_ptr + out_off, cast(top_w, w_ptr.dtype.element_ty, EMU), mask=out_mask)
    tl.store(ids_ptr + out_off, top_i.to(tl.int64), mask=out_mask)
    if SHARED:  # the shared expert's slot: weight sigmoid(its gate logit), id E
        gw = 1.0 / (1.0 + tl.exp(-g))
        tl.store(w_ptr + rows.to(tl.int64) * OUT_K + TOPK, cast(gw, w_ptr.dtype.element_ty, EMU), mask=row_ok)
        tl.store(ids_ptr + rows.to(tl.int64) * OUT_K + TOPK, tl.zeros_like(rows).to(tl.int64) + E, mask=row_ok)


def moe_route(router_logits: torch.Tensor, top_k: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (weights [T, k (+1)] in the logits' dtype, expert ids [T, k (+1)] int64); see the module docstring for
    ties and `shared`."""
    t, e = router_logits.shape
    e -= shared
    if top_k > e:
        raise ValueError(f"top_k={top_k} > {e} experts")
    w = _empty((t, top_k + shared), router_logits.dtype, router_logits.device)
    ids = _empty((t, top_k + shared), torch.int64, router_logits.device)
    if t == 0:
        return w, ids
    if router_logits.stride(-1) != 1:
        router_logits = router_logits.contiguous()
    block_e = triton.next_power_of_2(e)
    # decode sizes: one token per single-warp program (reductions are warp shuffles, no shared-memory round
    # trips); prefill: 4 tokens x 256 experts per 4-warp program, 8 values per thread and tensor
    block_t = 1 if t <= 256 else max(1, min(4, 1024 // block_e))
    warps = 1 if block_t == 1 and block_e <= 512 else 4
    _route_kernel[(triton.cdiv(t, block_t),)](
        router_logits, w, ids, t, e, router_logits.stride(0),
        TOPK=top_k, TOPK_P=triton.next_power_of_2(top_k), BLOCK_T=block_t, BLOCK_E=block_e,
        EMU=interpreted(_route_kernel), num_warps=warps, SHARED=shared,
        **pdl_kwargs(router_logits, t),
    )  # fmt: skip
    return w, ids


ROUTER_MAX_T = 8  # tokens the fused router takes (decode); more: the router GEMV, then moe_route
_ROUTER_ROWS = 4  # router rows per program (experts' logits)
# 8 warps at any token count: each token's partial logits are reduced by the same layout (the same fp32 sum)
# however many tokens come along, and the last program keeps 8 tokens' [E] int64 keys off local memory
ROUTER_WARPS = 8


@triton.jit
def _router_kernel(
    x_ptr, rw_ptr, part_ptr, cnt_ptr, w_ptr, ids_ptr, T, E, E_ALL, H, stride_x, stride_rw,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, EMU: tl.constexpr, PDL: tl.constexpr, SHARED: tl.constexpr,
):  # fmt: skip
    """The router GEMV (logits = x @ router^T) and the route in one launch: program (r, s) takes BLOCK_R router rows
    over the s-th BLOCK_H slice of H for every token (fp32 partials [splits, T, E_ALL]); the last program to
    arrive sums the slices in order, rounds the logits to x's dtype (as the GEMV's output is) and routes them."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    split = tl.program_id(1)
    k = split * BLOCK_H + tl.arange(0, BLOCK_H)
    wmask = (r < E_ALL)[:, None] & (k < H)[None, :]
    w = tl.load(rw_ptr + r.to(tl.int64)[:, None] * stride_rw + k[None, :], mask=wmask, other=0.0).to(tl.float32)
    pdl_start(PDL)  # the weights are read before the wait: nothing writes them
    t = T - T
    while t < T:  # a while loop: Triton's interpreter cannot range() over a scalar argument here
        xv = tl.load(x_ptr + t * stride_x + k, mask=k < H, other=0.0).to(tl.float32)
        tl.store(part_ptr + (split * T + t) * E_ALL + r, tl.sum(w * xv[None, :], axis=1), mask=r < E_ALL)
        t += 1
    tl.debug_barrier()  # every thread's partials are written before the ticket releases them
    if tl.atomic_add(cnt_ptr, 1, sem="acq_rel") == tl.num_programs(0) * tl.num_programs(1) - 1:
        rows = tl.arange(0, BLOCK_T)
        cols = tl.arange(0, BLOCK_E)
        row_ok = rows < T
        col_ok = cols < E
        m = row_ok[:, None] & col_ok[None, :]
        acc = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.float32)
        g = tl.zeros([BLOCK_T], dtype=tl.float32)
        s = split - split
        while s < tl.num_programs(1):  # the H slices in order: the same sum for any token count
            base = part_ptr + (s * T + rows)[:, None] * E_ALL
            acc += tl.load(base + cols[None, :], mask=m, other=0.0, cache_modifier=".cg")
            if SHARED:
                g += tl.load(part_ptr + (s * T + rows) * E_ALL + E, mask=row_ok, other=0.0, cache_modifier=".cg")
            s += 1
        dt: tl.constexpr = x_ptr.dtype.element_ty
        x = tl.where(m, round_to(acc, dt, EMU), float("-inf"))
        _route_rows(x, round_to(g, dt, EMU), rows, row_ok, cols, col_ok, w_ptr, ids_ptr, E, TOPK, TOPK_P, BLOCK_T,
                    BLOCK_E, EMU, SHARED)  # fmt: skip
        tl.atomic_xchg(cnt_ptr, 0)


def router_fits(x: torch.Tensor, router_weight: torch.Tensor) -> bool:
    """Whether moe_router takes this call: decode sizes, bf16 / fp16 / fp32 logits in x's dtype, unit strides."""
    return (0 < x.shape[0] <= ROUTER_MAX_T and x.dtype == router_weight.dtype and x.stride(-1) == 1
            and router_weight.stride(-1) == 1 and router_weight.shape[1] == x.shape[1])  # fmt: skip


def moe_router(
    x: torch.Tensor, router_weight: torch.Tensor, top_k: int, shared: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_route(x @ router_weight^T, top_k, shared) in one launch (router_fits: decode sizes); the logits are
    rounded to x's dtype first, as the GEMV's output is, so only the order of the fp32 sum differs."""
    t, h = x.shape
    e_all = router_weight.shape[0]
    e = e_all - shared
    if top_k > e:
        raise ValueError(f"top_k={top_k} > {e} experts")
    w = _empty((t, top_k + shared), x.dtype, x.device)
    ids = _empty((t, top_k + shared), torch.int64, x.device)
    block_h = min(512, triton.next_power_of_2(triton.cdiv(h, 8)))  # about 8 slices of H
    splits = triton.cdiv(h, block_h)
    part = torch.empty((splits, t, e_all), dtype=torch.float32, device=x.device)
    cnt = counter_buffer(x.device)[COUNTERS - 1 :]  # the last counter: one per launch, reset by its last program
    _router_kernel[(triton.cdiv(e_all, _ROUTER_ROWS), splits)](
        x, router_weight, part, cnt, w, ids, t, e, e_all, h, x.stride(0), router_weight.stride(0),
        TOPK=top_k, TOPK_P=triton.next_power_of_2(top_k), BLOCK_T=triton.next_power_of_2(t),
        BLOCK_E=triton.next_power_of_2(e), BLOCK_R=_ROUTER_ROWS, BLOCK_H=block_h, EMU=interpreted(_router_kernel),
        SHARED=shared, num_warps=ROUTER_WARPS, **pdl_kwargs(x, t),
    )  # fmt: skip
    return w, ids
