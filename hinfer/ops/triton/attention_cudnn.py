"""Prefill attention on cuDNN's fused attention (through torch) over the cache read back in blocks.

The Triton prefill kernel runs its two MMAs and the softmax one after the other (about 320 TFLOP/s at 27B heads
on the H200); cuDNN's Hopper kernel runs the same causal attention near 660. It wants contiguous keys and values,
so a prefill chunk of n tokens after `cached` ones is split where the mask allows it:

    out = merge( attention(q, K[0:B]), attention(q, K[B:2B]), ...,   # the cached prefix: no mask at all
                 causal(q, K[cached:cached + n]) )                    # the chunk itself: causal, square

each part computed by cuDNN with its log-sum-exp and merged exactly (the split-KV rule the decode combine uses).
The keys and values of each part are read from the paged cache in the model dtype (`kv_read.read_kv_heads`:
any KV format, codes times scales, any page order, one pass) in blocks of at most `BLOCK` tokens, so the extra
memory stays bounded at any depth. The reference twin is the same `hinfer.ops.attention.paged_attention_ref`.

cuDNN builds an execution plan per new (queries, keys) shape, so the parts come in a bounded set of shapes
(`part_plan`): queries padded to a multiple of QUANTUM rows (extra rows are computed and dropped), the
prefix's last partial block split into powers of two of at least QUANTUM keys, and the under-QUANTUM rest of
the prefix folded into the causal part by as many dummy query rows in front (top-left causal over keys
[cached - lead, cached + n) then gives each real row exactly its keys), that part's keys padded with zero rows
to its padded length (no real row reaches them).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hinfer.ops.triton.kv_read import read_kv_heads
from hinfer.ops.triton.parts_merge import merge_part

log = logging.getLogger(__name__)

BLOCK = 32768  # cached tokens per part: 128 MiB of bf16 keys + values at 4 KV heads x 256
MIN_Q = 1024  # shorter chunks stay on the Triton kernel (cuDNN's win grows with the query tile count)
QUANTUM = 256  # query rows and key pieces come in multiples of it: a bounded set of cuDNN plan shapes

# (q [1, H, n, D], k [1, Hkv, S, D], v, causal, scale) -> (out [1, H, n, D], lse [H, n] fp32, natural log)
Part = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool, float], tuple[torch.Tensor, torch.Tensor]]

_failed = False  # cuDNN refused a shape once: the Triton kernel from then on, for the process
_planned: set[tuple[int, int, bool]] = set()  # (query rows, key rows, causal) shapes warm_plans ran


def cudnn_mode() -> str:
    """HINFER_PREFILL_CUDNN: `planned` (the default) runs on cuDNN the chunks whose part shapes were all planned at
    startup (`warm_plans`: a full chunk's, after any prefix), the rest on the Triton kernel, so no request waits
    for a plan; `1` every chunk of >= MIN_Q tokens, a new shape planned when it first comes (40-210 ms each on the
    H200); `0` the Triton kernel only."""
    v = os.environ.get("HINFER_PREFILL_CUDNN", "planned").strip()
    if v not in ("planned", "1", "0"):
        raise ValueError(f"HINFER_PREFILL_CUDNN must be `planned`, `1` or `0`, got {v!r}")
    return v


def cudnn_prefill_enabled(device: torch.device) -> bool:
    """Prefill chunks of >= MIN_Q tokens may go to cuDNN (`cudnn_mode` not `0`), on a GPU whose torch has it,
    until it refuses a shape (`cudnn_prefill_failed`)."""
    return (cudnn_mode() != "0" and not _failed and device.type == "cuda" and torch.backends.cudnn.is_available()
            and hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention"))  # fmt: skip


def cudnn_takes(cached: int, n: int) -> bool:
    """Whether a chunk of n tokens after `cached` goes to cuDNN (given `cudnn_prefill_enabled`): long enough, and
    in `planned` mode every part shape it brings planned at startup."""
    if n < MIN_Q:
        return False
    return cudnn_mode() == "1" or set(part_shapes(cached, n)) <= _planned


def cudnn_prefill_failed(err: Exception) -> None:
    """cuDNN failed on a chunk: log it once and leave prefill attention to the Triton kernel."""
    global _failed
    _failed = True
    log.warning("prefill attention on cuDNN failed (%s: %s); the Triton kernel from now on",
                type(err).__name__, str(err).split("\n")[0][:300])  # fmt: skip


def cudnn_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float):
    """One part by cuDNN, grouped KV heads passed as stored (torch 2.11 takes them: H200, 2026-12-04); a shape it
    refuses raises, and the caller leaves prefill to the Triton kernel."""
    o, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False,
                                                               scale=scale)[:2]  # fmt: skip
    return o, lse.reshape(q.shape[1], q.shape[2]).float()


def part_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float):
    """The torch body of a part (fp32 math): the CPU tests' stand-in for cuDNN."""
    g = q.shape[1] // k.shape[1]
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float().repeat_interleave(g, 1)) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.einsum("bhqk,bhkd->bhqd", torch.exp(s - lse[..., None]), v.float().repeat_interleave(g, 1))
    return o.to(q.dtype), lse[0]


@dataclass(frozen=True)
class PartSpan:
    """Keys [start, stop) of one part; `lead` dummy query rows before the real ones (the causal part only)."""

    start: int
    stop: int
    causal: bool
    lead: int = 0


def part_plan(cached: int, n: int, block: int = BLOCK, quantum: int = QUANTUM) -> list[PartSpan]:
    """The parts of a chunk of n tokens after `cached`: whole blocks, the rest of the prefix in powers of two of
    at least `quantum` keys (largest first), then the causal part over the under-`quantum` remainder and the
    chunk."""
    spans = [PartSpan(s, s + block, False) for s in range(0, cached - block + 1, block)]
    at = len(spans) * block
    lead = (cached - at) % quantum
    rest = cached - at - lead
    for bit in reversed(range(rest.bit_length())):
        if rest >> bit & 1:
            spans.append(PartSpan(at, at + (1 << bit), False))
            at += 1 << bit
    return [*spans, PartSpan(cached - lead, cached + n, True, lead)]


def _padded(x: int, quantum: int) -> int:
    return -(-x // quantum) * quantum


def part_shapes(cached: int, n: int, block: int = BLOCK, quantum: int = QUANTUM) -> list[tuple[int, int, bool]]:
    """The (query rows, key rows, causal) shape of each part `cudnn_prefill` gives cuDNN for this chunk."""
    shapes = []
    for span in part_plan(cached, n, block, quantum):
        rows = _padded(span.lead + n, quantum)
        shapes.append((rows, rows if span.causal else span.stop - span.start, span.causal))
    return shapes


def plan_shapes(n: int, max_context: int, block: int = BLOCK, quantum: int = QUANTUM) -> list[tuple[int, int, bool]]:
    """Every (query rows, key rows, causal) part shape `cudnn_prefill` gives cuDNN for a chunk of n tokens after any
    prefix that leaves it within max_context: the prefix's parts (queries padded, keys a whole block or a power of two of
    at least `quantum`), the causal part (square, its rows padded after 0..quantum - 1 leading dummy rows)."""
    rows, longest = _padded(n, quantum), max_context - n  # the longest prefix a chunk of n can follow
    pieces = [1 << b for b in range(quantum.bit_length() - 1, block.bit_length() - 1) if 1 << b <= longest]
    pieces += [block] if block <= longest else []
    causal = sorted({_padded(lead + n, quantum) for lead in range(quantum)})
    return [(rows, k, False) for k in pieces] + [(r, r, True) for r in causal]


def warm_plans(n_heads: int, n_kv: int, head_dim: int, dtype: torch.dtype, device: torch.device, chunk: int,
               max_context: int, scale: float) -> tuple[int, float]:  # fmt: skip
    """Run cuDNN once on zeros of every shape a full chunk brings (`plan_shapes(chunk, ...)`), so that its execution
    plans are built at startup rather than on the first request that reaches each: (shapes, seconds). A prompt's
    shorter last chunk may bring a new padded length, planned when it first comes (the parts' shapes stay a
    bounded set). The tensors are laid out as `cudnn_prefill` passes them (contiguous queries, keys and values per
    part); a refusal raises."""
    import time

    t0 = time.perf_counter()
    shapes = plan_shapes(chunk, max_context) if chunk >= MIN_Q else []
    for rows, keys, causal in shapes:
        q = torch.zeros((1, n_heads, rows, head_dim), dtype=dtype, device=device)
        kv = torch.zeros((1, n_kv, keys, head_dim), dtype=dtype, device=device)
        cudnn_part(q, kv, kv, causal, scale)
        _planned.add((rows, keys, causal))
        del q, kv
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return len(shapes), time.perf_counter() - t0


def cudnn_prefill(
    q: torch.Tensor,  # [n, H, D]: one sequence's new tokens (normed, rotated as the cache stores keys)
    k_cache: torch.Tensor,  # [P, page, Hkv, D / pack]
    v_cache: torch.Tensor,
    pages: torch.Tensor,  # [>= pages the sequence uses] its page ids
    cached: int,
    out: torch.Tensor,  # [n, H, D]
    scale: float,
    part: Part | None = None,  # None: cuDNN (the CPU tests pass part_ref)
    block: int = BLOCK,
    quantum: int = QUANTUM,
) -> None:
    """out = softmax(q K^T * scale) V over the cached prefix and the chunk (causal bottom-right), by parts of
    bounded shapes (part_plan)."""
    part = part or cudnn_part
    n, n_heads, d = q.shape
    o_acc = lse_acc = None
    queries: dict[int, torch.Tensor] = {}  # by lead: the padded query rows, built once
    for span in part_plan(cached, n, block, quantum):
        rows = _padded(span.lead + n, quantum)  # the part's query rows (and, causal, its key rows)
        if span.lead not in queries:
            queries[span.lead] = q.new_zeros((1, n_heads, rows, d))
            queries[span.lead][0, :, span.lead : span.lead + n] = q.transpose(0, 1)
        qh = queries[span.lead]
        keys = rows if span.causal else span.stop - span.start
        k = read_kv_heads(k_cache, pages, span.start, span.stop, q.dtype, d, keys).unsqueeze(0)
        v = read_kv_heads(v_cache, pages, span.start, span.stop, q.dtype, d, keys).unsqueeze(0)
        o, lse = part(qh, k, v, span.causal, scale)
        o, lse = o[0, :, span.lead : span.lead + n], lse[:, span.lead : span.lead + n]
        if o_acc is None:
            o_acc, lse_acc = o.float(), lse.contiguous()
        else:
            merge_part(o_acc, lse_acc, o, lse)
    out.copy_(o_acc.transpose(0, 1))
