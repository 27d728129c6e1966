"""Group the (token, slot) pairs of a batch by expert, on the device, without a host sync.

Pair p = t * k + s is token t's s-th choice, expert ids[p]. Each expert's pairs get a run of rows in `sorted`,
padded to a multiple of BM, and each BM-row block of `sorted` belongs to one expert:
  sorted [n_blocks * BM] int32   pair index per row (rows past an expert's count are never read)
  bexp   [n_blocks]      int32   expert of the block, -1 for blocks past the end (their programs exit)
  brows  [n_blocks]      int32   valid rows in the block (1..BM)
n_blocks is a static bound, (P + min(E, P) * (BM - 1)) // BM, so the GEMM grids depend on shapes only and the
whole thing can be captured in a CUDA graph. Rows of one expert are placed with atomic counters, so their
order inside the expert varies from run to run; that changes nothing: every GEMM row is computed on its own
and written back at its pair index.

Precondition (the router guarantees it): a token's k ids are distinct, so an expert has at most T pairs.

Small batches (P <= SMALL_MAX_PAIRS, decode) run one single-program kernel; larger ones a histogram kernel,
a single-program offsets kernel and a scatter kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import pdl_kwargs, pdl_start
from hinfer.ops.triton.moe_common import _empty

SMALL_MAX_PAIRS = 4096
_BP = 1024  # pairs per histogram / scatter chunk


class Alignment(NamedTuple):
    sorted: torch.Tensor
    bexp: torch.Tensor
    brows: torch.Tensor
    block_m: int

    @property
    def n_blocks(self) -> int:
        return self.bexp.shape[0]


def max_blocks(pairs: int, experts: int, block_m: int) -> int:
    return (pairs + min(experts, pairs) * (block_m - 1)) // block_m


@triton.jit
def _blocks_and_cursor(
    counts, cursor_ptr, bexp_ptr, brows_ptr, E, n_blocks, per_expert_blocks,
    BM: tl.constexpr, E_P: tl.constexpr, BJ: tl.constexpr, BF: tl.constexpr,
):  # fmt: skip
    """From per-expert counts [E_P]: cursor[e] = first row of expert e; the block map."""
    eidx = tl.arange(0, E_P)
    nb = (counts + BM - 1) // BM
    first = tl.cumsum(nb, 0) - nb  # first block of each expert
    tl.store(cursor_ptr + eidx, first * BM)
    for b0 in range(0, n_blocks, BF):
        b = b0 + tl.arange(0, BF)
        tl.store(bexp_ptr + b, tl.full([BF], -1, tl.int32), mask=b < n_blocks)
    tl.debug_barrier()  # the -1 fill lands before the real entries below
    for j0 in range(0, per_expert_blocks, BJ):
        j = j0 + tl.arange(0, BJ)
        blk = first[:, None] + j[None, :]
        ok = (j[None, :] < nb[:, None]) & (eidx < E)[:, None]
        rows = tl.minimum(counts[:, None] - j[None, :] * BM, BM)
        tl.store(bexp_ptr + blk, eidx[:, None] + 0 * j[None, :], mask=ok)
        tl.store(brows_ptr + blk, rows, mask=ok)


@triton.jit
def _scatter_chunk(ids_ptr, cursor_ptr, sorted_ptr, p0, P, BP: tl.constexpr):
    p = p0 + tl.arange(0, BP)
    ok = p < P
    e = tl.load(ids_ptr + p, mask=ok, other=0).to(tl.int32)
    pos = tl.atomic_add(cursor_ptr + e, 1, mask=ok, sem="relaxed")
    tl.store(sorted_ptr + pos, p, mask=ok)


@triton.jit
def _align_small_kernel(
    ids_ptr, cursor_ptr, sorted_ptr, bexp_ptr, brows_ptr, P, E, n_blocks, per_expert_blocks,
    BM: tl.constexpr, E_P: tl.constexpr, BP: tl.constexpr, BJ: tl.constexpr, BF: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_start(PDL)
    align_small(ids_ptr, cursor_ptr, sorted_ptr, bexp_ptr, brows_ptr, P, E, n_blocks, per_expert_blocks, BM, E_P,
                BP, BJ, BF)  # fmt: skip


@triton.jit
def align_small(
    ids_ptr, cursor_ptr, sorted_ptr, bexp_ptr, brows_ptr, P, E, n_blocks, per_expert_blocks,
    BM: tl.constexpr, E_P: tl.constexpr, BP: tl.constexpr, BJ: tl.constexpr, BF: tl.constexpr,
):  # fmt: skip
    """The whole alignment of P pairs in one program (see the module docstring)."""
    counts = tl.zeros([E_P], dtype=tl.int32)
    for p0 in range(0, P, BP):
        p = p0 + tl.arange(0, BP)
        ids = tl.load(ids_ptr + p, mask=p < P, other=0).to(tl.int32)
        counts += tl.histogram(ids, E_P, mask=p < P)
    _blocks_and_cursor(
        counts, cursor_ptr, bexp_ptr, brows_ptr, E, n_blocks, per_expert_blocks, BM, E_P, BJ, BF
    )
    tl.debug_barrier()  # cursor stores land before the atomics
    for p0 in range(0, P, BP):
        _scatter_chunk(ids_ptr, cursor_ptr, sorted_ptr, p0, P, BP)


@triton.jit
def _hist_kernel(ids_ptr, counts_ptr, P, E_P: tl.constexpr, BP: tl.constexpr):
    p = tl.program_id(0) * BP + tl.arange(0, BP)
    ids = tl.load(ids_ptr + p, mask=p < P, other=0).to(tl.int32)
    h = tl.histogram(ids, E_P, mask=p < P)
    tl.atomic_add(counts_ptr + tl.arange(0, E_P), h, sem="relaxed")


@triton.jit
def _offsets_kernel(
    counts_ptr, cursor_ptr, bexp_ptr, brows_ptr, E, n_blocks, per_expert_blocks,
    BM: tl.constexpr, E_P: tl.constexpr, BJ: tl.constexpr, BF: tl.constexpr,
):  # fmt: skip
    counts = tl.load(counts_ptr + tl.arange(0, E_P))
    _blocks_and_cursor(
        counts, cursor_ptr, bexp_ptr, brows_ptr, E, n_blocks, per_expert_blocks, BM, E_P, BJ, BF
    )


@triton.jit
def _scatter_kernel(ids_ptr, cursor_ptr, sorted_ptr, P, BP: tl.constexpr):
    _scatter_chunk(ids_ptr, cursor_ptr, sorted_ptr, tl.program_id(0) * BP, P, BP)


def alignment_buffers(p: int, t: int, num_experts: int, block_m: int, dev) -> tuple[Alignment, torch.Tensor, dict]:
    """The alignment's outputs for P = t * k pairs, its cursor scratch and the single-program kernel's block
    sizes (constexprs)."""
    e_p = triton.next_power_of_2(num_experts)
    nblk = max_blocks(p, num_experts, block_m)
    al = Alignment(_empty((nblk * block_m,), torch.int32, dev), _empty((nblk,), torch.int32, dev),
                   _empty((nblk,), torch.int32, dev), block_m)  # fmt: skip
    per_expert = triton.cdiv(t, block_m)  # an expert has <= T pairs
    consts = dict(BM=block_m, E_P=e_p, BP=min(_BP, triton.next_power_of_2(max(p, 1))),
                  BJ=min(triton.next_power_of_2(per_expert), max(1, 2048 // e_p)),
                  BF=min(1024, triton.next_power_of_2(nblk)))  # fmt: skip
    return al, _empty((e_p,), torch.int32, dev), consts


def align(ids: torch.Tensor, num_experts: int, block_m: int, pdl: bool = False) -> Alignment:
    """ids [T, k] (int32/int64, each row distinct) -> Alignment for BM = block_m rows per block; `pdl`: launch
    the single-program kernel with programmatic dependent launch (unless HINFER_PDL=0 or the device lacks it)."""
    t, k = ids.shape
    p = t * k
    flat = ids.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    dev = ids.device
    al, cursor, c = alignment_buffers(p, t, num_experts, block_m, dev)
    nblk, per_expert = al.n_blocks, triton.cdiv(t, block_m)
    if p <= SMALL_MAX_PAIRS:
        _align_small_kernel[(1,)](
            flat, cursor, al.sorted, al.bexp, al.brows, p, num_experts, nblk, per_expert, **c, num_warps=4,
            **(pdl_kwargs(ids) if pdl else {"PDL": False}),
        )  # fmt: skip
    else:
        counts = torch.zeros((c["E_P"],), dtype=torch.int32, device=dev)
        chunks = triton.cdiv(p, _BP)
        _hist_kernel[(chunks,)](flat, counts, p, E_P=c["E_P"], BP=_BP, num_warps=4)
        _offsets_kernel[(1,)](
            counts, cursor, al.bexp, al.brows, num_experts, nblk, per_expert,
            BM=block_m, E_P=c["E_P"], BJ=c["BJ"], BF=c["BF"], num_warps=4,
        )  # fmt: skip
        _scatter_kernel[(chunks,)](flat, cursor, al.sorted, p, BP=_BP, num_warps=4)
    return al
