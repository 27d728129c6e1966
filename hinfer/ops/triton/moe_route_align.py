"""Route a decode batch and group its pairs by expert in one launch: moe_route then moe_align.align, as one
single-program kernel for the few tokens of a decode step or a speculative verification (up to MAX_TOKENS).

The router's launch and the alignment's are each a handful of microseconds of one small program, serial on the
decode path (the experts' launches wait for both); here one program routes the tokens, BLOCK_T rows at a time
(moe_route.route_rows, so the choice, ties and weights are exactly the route kernel's), writes their ids and
weights, and after a barrier (its own global writes, read back by the same program) aligns the pairs as
moe_align.align_small does. Same outputs as the two launches: weights and ids equal, and an alignment with the
same blocks (the order of an expert's pairs inside its run varies, as align's own does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import interpreted, pdl_kwargs, pdl_start
from hinfer.ops.triton.moe_align import Alignment, align_small, alignment_buffers
from hinfer.ops.triton.moe_common import _empty
from hinfer.ops.triton.moe_route import route_rows

MAX_TOKENS = 32  # 8 lanes verifying 4 tokens
BLOCK_T = 4  # rows routed at a time (the route kernel's prefill block: 8 keys a thread at 4 warps)


@triton.jit
def _route_align_kernel(
    logits_ptr, w_ptr, ids_ptr, cursor_ptr, sorted_ptr, bexp_ptr, brows_ptr, T, E, stride_t, n_blocks,
    per_expert_blocks,
    TOPK: tl.constexpr, TOPK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, EMU: tl.constexpr,
    SHARED: tl.constexpr, BM: tl.constexpr, E_P: tl.constexpr, BP: tl.constexpr, BJ: tl.constexpr,
    BF: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_start(PDL)
    for t0 in range(0, T, BLOCK_T):
        route_rows(logits_ptr, w_ptr, ids_ptr, t0 + tl.arange(0, BLOCK_T), T, E, stride_t, TOPK, TOPK_P, BLOCK_T,
                   BLOCK_E, EMU, SHARED)  # fmt: skip
    tl.debug_barrier()  # every id is written before any thread of this program reads them back
    align_small(ids_ptr, cursor_ptr, sorted_ptr, bexp_ptr, brows_ptr, T * (TOPK + SHARED), E + SHARED, n_blocks,
                per_expert_blocks, BM, E_P, BP, BJ, BF)  # fmt: skip


def route_align(
    router_logits: torch.Tensor, top_k: int, shared: bool, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, Alignment]:
    """-> (weights [T, k (+1)], ids [T, k (+1)] int64, Alignment of the T * (k (+1)) pairs over the E (+1)
    experts for BM = block_m): moe_route(router_logits, top_k, shared) and align(ids, E (+1), block_m) in one
    launch, for 1 <= T <= MAX_TOKENS."""
    t, e = router_logits.shape
    e -= shared
    k = top_k + shared
    if not 0 < t <= MAX_TOKENS or top_k > e:
        raise ValueError(f"route_align: 1..{MAX_TOKENS} tokens choosing {top_k} of {e} experts, got {t}")
    if router_logits.stride(-1) != 1:
        router_logits = router_logits.contiguous()
    dev = router_logits.device
    w = _empty((t, k), router_logits.dtype, dev)
    ids = _empty((t, k), torch.int64, dev)
    al, cursor, c = alignment_buffers(t * k, t, e + shared, block_m, dev)
    _route_align_kernel[(1,)](
        router_logits, w, ids, cursor, al.sorted, al.bexp, al.brows, t, e, router_logits.stride(0), al.n_blocks,
        triton.cdiv(t, block_m), TOPK=top_k, TOPK_P=triton.next_power_of_2(top_k), BLOCK_T=BLOCK_T,
        BLOCK_E=triton.next_power_of_2(e), EMU=interpreted(_route_align_kernel), SHARED=shared, **c, num_warps=4,
        **pdl_kwargs(router_logits, t),
    )  # fmt: skip
    return w, ids, al
