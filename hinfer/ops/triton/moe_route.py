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

from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start
from hinfer.ops.triton.moe_common import _empty


@triton.jit
def _route_kernel(
    logits_ptr, w_ptr, ids_ptr, T, E, stride_t,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, EMU: tl.constexpr,
    PDL: tl.constexpr, SHARED: tl.constexpr = False,
):  # fmt: skip
    pdl_start(PDL)
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    route_rows(logits_ptr, w_ptr, ids_ptr, rows, T, E, stride_t, TOPK, TOPK_P, BLOCK_T, BLOCK_E, EMU, SHARED)


@triton.jit
def route_rows(
    logits_ptr, w_ptr, ids_ptr, rows, T, E, stride_t,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, EMU: tl.constexpr,
    SHARED: tl.constexpr,
):  # fmt: skip
    """Route the tokens `rows` ([BLOCK_T], those >= T skipped): their weights and ids stored at [row, slot]."""
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < T
    col_ok = cols < E
    ptrs = logits_ptr + rows.to(tl.int64)[:, None] * stride_t + cols[None, :]
    x = tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=float("-inf")).to(tl.float32)
    x = tl.where(row_ok[:, None] | ~col_ok[None, :], x, 0.0)  # rows past T: finite, no NaN from -inf - -inf
    # one key per expert: the logit's bits made order-preserving as an int (an involution; -0 folded into +0
    # first so that equal logits stay equal) above BLOCK_E - 1 - id, so one max picks the largest logit and, among
    # equal ones, the lowest id; taken or padded experts hold the key type's minimum (below every key). bf16
    # logits (fp32 bits with 16 zero low ones) fit an int32 key, the logit's bits in its upper half: a warp takes
    # its max in one reduction instruction, where an int64 max is two shuffle chains
    KEY32: tl.constexpr = logits_ptr.dtype.element_ty == tl.bfloat16 and BLOCK_E <= 65536
    bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    if KEY32:
        key = (ordered & -65536) | (BLOCK_E - 1 - cols)[None, :]
        taken = tl.full([BLOCK_T, BLOCK_E], -2147483648, tl.int32)
    else:
        key = (ordered.to(tl.int64) << 32) | (BLOCK_E - 1 - cols).to(tl.int64)[None, :]
        taken = tl.full([BLOCK_T, BLOCK_E], -9223372036854775807 - 1, tl.int64)
    key = tl.where(col_ok[None, :] & (rows >= 0)[:, None], key, taken)

    slots = tl.arange(0, TOPK_P)
    top_k32 = tl.zeros([BLOCK_T, TOPK_P], dtype=tl.int32)
    top_i = tl.zeros([BLOCK_T, TOPK_P], dtype=tl.int32)
    for j in tl.static_range(TOPK):
        best = tl.max(key, axis=1)
        if KEY32:
            idx = BLOCK_E - 1 - (best & 0xFFFF)
            hi = best & -65536
            hi = hi | ((hi >> 31) & 0xFFFF)  # the order-preserving bits whole again (a negative logit's low ones set)
        else:
            idx = BLOCK_E - 1 - (best & 0xFFFFFFFF).to(tl.int32)
            hi = (best >> 32).to(tl.int32)
        top_k32 = tl.where(slots[None, :] == j, hi[:, None], top_k32)
        top_i = tl.where(slots[None, :] == j, idx[:, None], top_i)
        key = tl.where(key == best[:, None], taken, key)  # keys are distinct within a row (the id in them)
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
    if SHARED:  # the gate of the shared expert, rounded to the logits' dtype first as the reference's is
        g = tl.load(logits_ptr + rows.to(tl.int64) * stride_t + E, mask=row_ok, other=0.0).to(tl.float32)
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
