"""Prefill attention on torch's FlashAttention-2 (varlen) kernel where a sequence's KV pages are consecutive.

A bf16 cache page holds its tokens' rows back to back, so a sequence whose pages are consecutive ids (what the
page pool hands a long prompt on a fresh or quiet server: it allocates in ascending order) has its keys and values
as one contiguous [tokens, Hkv, D] tensor: a view of the cache, no copy. FlashAttention-2 reads that directly,
with grouped query heads and causality aligned bottom-right (query i of a chunk after `cached` tokens sees keys
<= cached + i), which is the chunked prefill's mask. Where it applies it replaces the paged Triton kernel for that
sequence (`HINFER_PREFILL_FLASH`, docs/ARCHITECTURE.md); the Triton kernel stays the path for every other page
layout and KV format, and the reference twin is the same `hinfer.ops.attention.paged_attention`.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)
_announced = False


def flash_prefill_enabled() -> bool:
    """HINFER_PREFILL_FLASH=1: bf16 prefill sequences on consecutive pages take FlashAttention-2 (default 0, until
    measured on the H200), where this torch has the kernel."""
    on = os.environ.get("HINFER_PREFILL_FLASH", "0").strip() == "1"
    return on and hasattr(torch.ops.aten, "_flash_attention_forward")


def contiguous_run(pages: list[int], n_pages: int) -> int:
    """The first page id when pages[:n_pages] are consecutive ids, else -1."""
    if n_pages == 0 or len(pages) < n_pages:
        return -1
    p0 = pages[0]
    return p0 if all(pages[i] == p0 + i for i in range(1, n_pages)) else -1


def flash_prefill(
    q: torch.Tensor,  # [n, H, D]: one sequence's new tokens
    k: torch.Tensor,  # [cached + n, Hkv, D], rows contiguous
    v: torch.Tensor,
    out: torch.Tensor,  # [n, H, D]
    scale: float,
) -> None:
    """out = softmax(q k^T * scale) v, causal bottom-right, by torch's FlashAttention-2 varlen kernel (one
    sequence: cumulative lengths [0, n] and [0, cached + n])."""
    global _announced
    if not _announced:  # once a process: the bench's A/B then shows which path its prefill took
        log.info("prefill attention: FlashAttention-2 on consecutive KV pages (HINFER_PREFILL_FLASH)")
        _announced = True
    n, kv = q.shape[0], k.shape[0]
    lens = torch.tensor([0, n, 0, kv], dtype=torch.int32, device=q.device)
    o = torch.ops.aten._flash_attention_forward(q, k, v, lens[:2], lens[2:], n, kv, 0.0, True, False, scale=scale)[0]
    out.copy_(o)


def cache_rows(cache: torch.Tensor, first_page: int, tokens: int) -> torch.Tensor:
    """The [tokens, Hkv, D] rows of a plain (unscaled) cache [P, page, Hkv, D] from `first_page` on: a view."""
    page = cache.shape[1]
    assert cache.stride(0) == page * cache.stride(1), "a plain cache: pages of token rows back to back"
    start = first_page * page
    return cache.flatten(0, 1)[start : start + tokens]
