"""The MoE router in one launch at decode sizes (Gluon): logits = x @ router^T, softmax, top k, renormalised.

Program p computes BLOCK_R router rows over the whole hidden size for every token (rows over the warps, H over
the lanes: the dot products reduce inside a warp) and writes fp32 logits to a [T, E_ALL] scratch; the last
program to arrive (linear_splitk's counters) rounds them to x's dtype, as the router GEMV's output is, and
routes every token as hinfer/ops/triton/moe_route.py's kernel does, one token per warp (its reductions are
warp shuffles: no cross-warp step). Only the fp32 summation order differs from linear + moe_route, so a choice
can differ only where the k-th and (k+1)-th logits are within a bf16 rounding step. SHARED: the last router row
is a folded shared expert's gate (slot k, weight sigmoid(gate), id E).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_int4_mma import _pdl_start
from hinfer.ops.triton.linear_splitk import COUNTERS, counter_buffer

ROUTER_MAX_T = 8  # tokens one launch routes (a warp each); more: the router GEMV, then moe_route
ROUTER_WARPS = 8
ROUTER_ROWS = 16  # router rows per program: 17 programs for 257 rows
ROUTER_BLOCK_H = 512  # hidden elements per step (16 per lane)


@gluon.jit
def _router_kernel(
    x_ptr, rw_ptr, logit_ptr, cnt_ptr, w_ptr, ids_ptr, T, E, E_ALL, H, stride_x, stride_rw,
    TOPK: gl.constexpr, TOPK_P: gl.constexpr, BLOCK_E: gl.constexpr, BLOCK_R: gl.constexpr,
    BLOCK_H: gl.constexpr, SHARED: gl.constexpr, PDL: gl.constexpr,
):  # fmt: skip
    W: gl.constexpr = gl.num_warps()
    LG: gl.constexpr = gl.BlockedLayout([1, BLOCK_H // 32], [1, 32], [W, 1], [1, 0])  # [rows, H]
    r = gl.program_id(0) * BLOCK_R + gl.arange(0, BLOCK_R, layout=gl.SliceLayout(1, LG))
    kk = gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, LG))
    r_ok = r < E_ALL
    w_ptrs = rw_ptr + r.to(gl.int64)[:, None] * stride_rw + kk[None, :]
    _pdl_start(PDL)
    for t in range(T):
        acc = gl.zeros([BLOCK_R], gl.float32, layout=gl.SliceLayout(1, LG))
        for k0 in range(0, H, BLOCK_H):
            k_ok = k0 + kk < H
            wv = gl.load(w_ptrs + k0, mask=r_ok[:, None] & k_ok[None, :], other=0.0).to(gl.float32)
            xv = gl.load(x_ptr + t * stride_x + k0 + kk, mask=k_ok, other=0.0).to(gl.float32)
            acc += gl.sum(wv * xv[None, :], axis=1)
        gl.store(logit_ptr + t * E_ALL + r, acc, mask=r_ok)
    gl.thread_barrier()  # every thread's logits are written before the ticket releases them
    if gl.atomic_add(cnt_ptr, 1, sem="acq_rel") == gl.num_programs(0) - 1:
        _route(logit_ptr, w_ptr, ids_ptr, T, E, E_ALL, x_ptr.dtype.element_ty, TOPK, TOPK_P, BLOCK_E, SHARED)
        gl.atomic_xchg(cnt_ptr, 0)


@gluon.jit
def _route(logit_ptr, w_ptr, ids_ptr, T, E, E_ALL, DT: gl.constexpr, TOPK: gl.constexpr, TOPK_P: gl.constexpr,
           BLOCK_E: gl.constexpr, SHARED: gl.constexpr):  # fmt: skip
    """Route the [T, E_ALL] fp32 logits, token t in warp t: the logits rounded to DT; the top k by one int64 max
    per slot over keys (the logit's bits made order-preserving above BLOCK_E - 1 - id: ties go to the lowest id);
    p = exp(x - max) / sum exp(x - max) on the chosen ones, renormalised (moe_route.py's arithmetic)."""
    W: gl.constexpr = gl.num_warps()
    LR: gl.constexpr = gl.BlockedLayout([1, BLOCK_E // 32], [1, 32], [W, 1], [1, 0])  # [token, expert]
    LS: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [W, 1], [1, 0])  # [token, slot]: token t in warp t too
    rows = gl.arange(0, W, layout=gl.SliceLayout(1, LR))
    cols = gl.arange(0, BLOCK_E, layout=gl.SliceLayout(0, LR))
    row_ok = rows < T
    col_ok = cols < E
    m2 = row_ok[:, None] & col_ok[None, :]
    x = gl.load(logit_ptr + rows[:, None] * E_ALL + cols[None, :], mask=m2, other=0.0, cache_modifier=".cg")
    x = x.to(DT).to(gl.float32)  # the GEMV's output dtype
    x = gl.where(col_ok[None, :], x, float("-inf"))
    bits = gl.where(x == 0.0, 0.0, x).to(gl.int32, bitcast=True)
    key = ((bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(gl.int64) << 32) | (BLOCK_E - 1 - cols).to(gl.int64)[None, :]
    taken = gl.full([W, BLOCK_E], -9223372036854775807 - 1, gl.int64, layout=LR)
    key = gl.where(col_ok[None, :] & (rows >= 0)[:, None], key, taken)

    srows = gl.arange(0, W, layout=gl.SliceLayout(1, LS))
    slots = gl.arange(0, TOPK_P, layout=gl.SliceLayout(0, LS))
    top_k32 = gl.zeros([W, TOPK_P], gl.int32, layout=LS)
    top_i = gl.zeros([W, TOPK_P], gl.int32, layout=LS)
    for j in gl.static_range(TOPK):
        best = gl.max(key, axis=1)  # inside the token's warp
        idx = BLOCK_E - 1 - (best & 0xFFFFFFFF).to(gl.int32)
        key = gl.where(cols[None, :] == idx[:, None], taken, key)
        best_s = gl.convert_layout(best, gl.SliceLayout(1, LS))
        idx_s = gl.convert_layout(idx, gl.SliceLayout(1, LS))
        top_k32 = gl.where(slots[None, :] == j, (best_s >> 32).to(gl.int32)[:, None], top_k32)
        top_i = gl.where(slots[None, :] == j, idx_s[:, None], top_i)
    top_x = (top_k32 ^ ((top_k32 >> 31) & 0x7FFFFFFF)).to(gl.float32, bitcast=True)  # the chosen logits
    m = gl.sum(gl.where(slots[None, :] == 0, top_x, 0.0), axis=1)  # slot 0's: the row's largest logit
    m_r = gl.convert_layout(m, gl.SliceLayout(1, LR))
    ex = gl.where(col_ok[None, :], gl.exp(x - m_r[:, None]), 0.0)
    total = gl.convert_layout(gl.sum(ex, axis=1), gl.SliceLayout(1, LS))
    top_p = gl.where((slots < TOPK)[None, :], gl.exp(top_x - m[:, None]) / total[:, None], 0.0)
    top_w = top_p / gl.sum(top_p, axis=1)[:, None]
    OUT_K: gl.constexpr = TOPK + SHARED
    out_mask = (srows < T)[:, None] & (slots < TOPK)[None, :]
    out_off = srows.to(gl.int64)[:, None] * OUT_K + slots[None, :]
    gl.store(w_ptr + out_off, top_w.to(w_ptr.dtype.element_ty), mask=out_mask)
    gl.store(ids_ptr + out_off, top_i.to(gl.int64), mask=out_mask)
    if SHARED:  # the shared expert's slot: weight sigmoid(its gate logit, in DT), id E
        g = gl.load(logit_ptr + srows * E_ALL + E, mask=srows < T, other=0.0, cache_modifier=".cg")
        g = g.to(DT).to(gl.float32)
        gw = 1.0 / (1.0 + gl.exp(-g))
        gl.store(w_ptr + srows.to(gl.int64) * OUT_K + TOPK, gw.to(w_ptr.dtype.element_ty), mask=srows < T)
        gl.store(ids_ptr + srows.to(gl.int64) * OUT_K + TOPK, gl.zeros_like(srows).to(gl.int64) + E,
                 mask=srows < T)  # fmt: skip


def router_fits(x: torch.Tensor, router_weight: torch.Tensor) -> bool:
    """Whether moe_router takes this call: decode sizes on CUDA, x and the router in one 16-bit dtype, unit
    strides, at most 256 experts (a warp's keys)."""
    return (x.is_cuda and 0 < x.shape[0] <= ROUTER_MAX_T and x.dtype == router_weight.dtype
            and x.dtype in (torch.bfloat16, torch.float16) and x.stride(-1) == 1 and router_weight.stride(-1) == 1
            and router_weight.shape[1] == x.shape[1] and router_weight.shape[0] <= 257)  # fmt: skip


def moe_router(x: torch.Tensor, router_weight: torch.Tensor, top_k: int, shared: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """moe_route(x @ router_weight^T, top_k, shared) in one launch (router_fits: decode sizes)."""
    t, h = x.shape
    e_all = router_weight.shape[0]
    e = e_all - shared
    if top_k > e:
        raise ValueError(f"top_k={top_k} > {e} experts")
    w = torch.empty((t, top_k + shared), dtype=x.dtype, device=x.device)
    ids = torch.empty((t, top_k + shared), dtype=torch.int64, device=x.device)
    logits = torch.empty((t, e_all), dtype=torch.float32, device=x.device)
    cnt = counter_buffer(x.device)[COUNTERS - 1 :]  # the last counter: one per launch, reset by its last program
    _router_kernel[(-(-e_all // ROUTER_ROWS),)](
        x, router_weight, logits, cnt, w, ids, t, e, e_all, h, x.stride(0), router_weight.stride(0),
        TOPK=top_k, TOPK_P=max(2, 1 << (top_k - 1).bit_length()), BLOCK_E=max(32, 1 << (e - 1).bit_length()),
        BLOCK_R=ROUTER_ROWS, BLOCK_H=ROUTER_BLOCK_H, SHARED=shared, num_warps=ROUTER_WARPS, **pdl_kwargs(x, t),
    )  # fmt: skip
    return w, ids


def router_variant(shared: bool, pdl: bool = True, one_token: bool = False):
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot); one_token: T
    specialised to 1, as the JIT compiles a call with one token."""
    sig = {"x_ptr": "*bf16", "rw_ptr": "*bf16", "logit_ptr": "*fp32", "cnt_ptr": "*i32", "w_ptr": "*bf16",
           "ids_ptr": "*i64", "T": "i32", "E": "i32", "E_ALL": "i32", "H": "i32", "stride_x": "i32",
           "stride_rw": "i32"}  # fmt: skip
    cex = dict(TOPK=8, TOPK_P=8, BLOCK_E=256, BLOCK_R=ROUTER_ROWS, BLOCK_H=ROUTER_BLOCK_H, SHARED=shared, PDL=pdl)
    if one_token:
        del sig["T"]
        cex["T"] = 1
    name = f"moe router{' shared' if shared else ''}{' T=1' if one_token else ''}{' pdl' if pdl else ''}"
    return name, _router_kernel, sig, cex, ROUTER_WARPS
