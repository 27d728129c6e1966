"""Triton twins of hinfer.ops.attention: `qk_norm_rope_write` and `paged_attention`.

paged_attention sends the batch's leading sequences with q_len <= DECODE_MAX_Q (decode lanes and k+1
speculative verification; the scheduler orders decode first) to the split-KV decode kernel, and the rest
(prefill/extend chunks) to the flash-attention prefill kernel. A decode-only batch launches only the
decode kernels, whose grid depends on static shapes alone (CUDA-graph safe).
"""

from __future__ import annotations

import torch

from hinfer.batch import ForwardBatch
from hinfer.ops.dispatch import launch_fusions
from hinfer.ops.triton.activation import sigmoid_gate
from hinfer.ops.triton.attention_decode import paged_decode
from hinfer.ops.triton.attention_flash import cache_rows, contiguous_run, flash_prefill, flash_prefill_enabled
from hinfer.ops.triton.attention_prefill import paged_prefill
from hinfer.ops.triton.attention_rope import qk_norm_rope_write

__all__ = ["DECODE_MAX_Q", "paged_attention", "qk_norm_rope_write"]

DECODE_MAX_Q = 8


def paged_attention(
    q: torch.Tensor,  # [T, H, D] (normed and rotated)
    k_cache: torch.Tensor,  # [P, page, Hkv, D]
    v_cache: torch.Tensor,
    batch: ForwardBatch,
    scale: float,
    gate: torch.Tensor | None = None,  # [T, H, D]: out * sigmoid(gate)
) -> torch.Tensor:
    """Attention over the paged cache; with `gate`, times sigmoid(gate) (activation.sigmoid_gate's rounding), in
    the decode kernels' own epilogue when every sequence is short (decode, verify) and launch fusions are on."""
    t, n_heads, d = q.shape
    assert d & (d - 1) == 0 and k_cache.shape[1] & (k_cache.shape[1] - 1) == 0, "head_dim, page: powers of 2"
    assert n_heads % k_cache.shape[2] == 0 and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    out = torch.empty((t, n_heads, d), dtype=q.dtype, device=q.device)
    q_lens = batch.q_lens_cpu
    if t == 0 or not q_lens:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    n_dec = 0
    while n_dec < len(q_lens) and q_lens[n_dec] <= DECODE_MAX_Q:
        n_dec += 1
    common = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, scale)
    fused_gate = gate is not None and n_dec == len(q_lens) and launch_fusions("gate", t)
    if n_dec:
        n_tok = t if n_dec == len(q_lens) else sum(q_lens[:n_dec])
        paged_decode(q, k_cache, v_cache, out, *common, n_dec, n_tok, max(q_lens[:n_dec]),
                     gate=gate if fused_gate else None)  # fmt: skip
    if n_dec < len(q_lens) and not _flash_prefills(q, k_cache, v_cache, out, batch, n_dec, scale):
        rest = q_lens[n_dec:]
        tok0 = sum(q_lens[:n_dec])
        kv_max = max(c + n for c, n in zip(batch.cached_lens_cpu[n_dec:], rest))
        paged_prefill(q, k_cache, v_cache, out, *common, n_dec, len(rest), max(rest), kv_max=kv_max, tok0=tok0,
                      n_tok=t - tok0)  # fmt: skip
    return out if gate is None or fused_gate else sigmoid_gate(out, gate)


def _flash_prefills(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, batch: ForwardBatch,
    n_dec: int, scale: float,
) -> bool:  # fmt: skip
    """Sequences n_dec.. (prefill chunks) by FlashAttention-2 when HINFER_PREFILL_FLASH=1, the caches are plain
    bf16 / fp16 and each of those sequences' pages are consecutive (attention_flash); -> whether it ran them."""
    if not flash_prefill_enabled() or not q.is_cuda or batch.page_ids_cpu is None:
        return False
    if k_cache.dtype not in (torch.bfloat16, torch.float16) or v_cache.dtype != k_cache.dtype:
        return False
    page = k_cache.shape[1]
    tok0 = sum(batch.q_lens_cpu[:n_dec])
    runs = []
    for i in range(n_dec, batch.num_seqs):
        kv = batch.cached_lens_cpu[i] + batch.q_lens_cpu[i]
        first = contiguous_run(batch.page_ids_cpu[i], -(-kv // page))
        if first < 0:
            return False
        runs.append((first, kv))
    for (first, kv), n in zip(runs, batch.q_lens_cpu[n_dec:]):
        rows = slice(tok0, tok0 + n)
        flash_prefill(q[rows], cache_rows(k_cache, first, kv), cache_rows(v_cache, first, kv), out[rows], scale)
        tok0 += n
    return True
