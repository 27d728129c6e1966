"""The split-K epilogue shared by the skinny linear kernels, and its persistent per-device counters.

With SPLIT_K > 1 each program writes an fp32 partial tile, bumps a per-tile counter, and the last one to arrive
sums the partials in a fixed order (deterministic), writes y and resets the counter to zero for the next
launch. No host sync and no allocation but the partials (torch.empty), so it is CUDA-graph capturable.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import zeroed_counters

COUNTERS = 1 << 16


@triton.jit
def store_tile(
    acc, rn, rm, n_ok, m_ok, y_ptr, stride_ym, part_ptr, cnt_ptr, M, N, pid_k, tile,
    SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """acc fp32 [BLOCK_N, BLOCK_M] -> y[rm, rn] (rows of y are the M rows of x), reduced over the K splits."""
    out_mask = n_ok[:, None] & m_ok[None, :]
    y_ptrs = y_ptr + rm[None, :] * stride_ym + rn[:, None]
    if SPLIT_K == 1:
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=out_mask)
    else:
        p_off = rm[None, :].to(tl.int64) * N + rn[:, None]
        tl.store(part_ptr + pid_k * M * N + p_off, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's partial is written before the release below
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
            for i in tl.static_range(SPLIT_K):  # fixed order: the sum does not depend on arrival order
                total += tl.load(part_ptr + i * M * N + p_off, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptrs, total.to(y_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(cnt_ptr + tile, 0)


def counter_buffer(device: torch.device) -> torch.Tensor:
    """The split-K kernels' arrival counters (COUNTERS of them, common.zeroed_counters)."""
    return zeroed_counters("split-K", COUNTERS, device)


def split_scratch(split_k: int, m: int, n: int, tiles: int, like: torch.Tensor, out: torch.Tensor):
    """(fp32 partials, counters) for a split launch; unused placeholders when split_k == 1."""
    if split_k == 1:
        return out, out
    assert tiles <= COUNTERS
    part = torch.empty((split_k, m, n), dtype=torch.float32, device=like.device)
    return part, counter_buffer(like.device)
