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
from hinfer.ops.triton.attention_cudnn import (
    cudnn_prefill,
    cudnn_prefill_enabled,
    cudnn_prefill_failed,
    cudnn_takes,
)
from hinfer.ops.triton.attention_decode import paged_decode
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
    if n_dec < len(q_lens):
        on_cudnn = _cudnn_prefills(q, k_cache, v_cache, out, batch, n_dec, scale)
        for a, b in _runs([i for i in range(n_dec, len(q_lens)) if i not in on_cudnn]):  # the rest on Triton
            tok0 = sum(q_lens[:a])
            kv_max = max(c + n for c, n in zip(batch.cached_lens_cpu[a:b], q_lens[a:b]))
            paged_prefill(q, k_cache, v_cache, out, *common, a, b - a, max(q_lens[a:b]), kv_max=kv_max, tok0=tok0,
                          n_tok=sum(q_lens[a:b]))  # fmt: skip
    return out if gate is None or fused_gate else sigmoid_gate(out, gate)


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Ascending sequence indices as maximal runs of consecutive ones, [start, stop) each."""
    runs: list[tuple[int, int]] = []
    for i in seqs:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _cudnn_prefills(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, batch: ForwardBatch,
    n_dec: int, scale: float,
) -> set[int]:  # fmt: skip
    """The prefill chunks (sequences n_dec..) cuDNN takes (attention_cudnn.cudnn_takes: at least MIN_Q new tokens,
    by default in shapes planned at startup) on cuDNN; -> the sequences it ran (the Triton kernel takes the
    others)."""
    if not cudnn_prefill_enabled(q.device) or q.dtype not in (torch.bfloat16, torch.float16):
        return set()  # cuDNN's fused attention is 16-bit only: an fp32 model stays on the Triton kernel
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        return set()  # its parts follow host-side lengths: a captured graph keeps the Triton kernel
    q_lens = batch.q_lens_cpu
    long = [i for i in range(n_dec, batch.num_seqs) if cudnn_takes(batch.cached_lens_cpu[i], q_lens[i])]
    try:
        for i in long:
            rows = slice(sum(q_lens[:i]), sum(q_lens[: i + 1]))
            cudnn_prefill(q[rows], k_cache, v_cache, batch.page_table[i], batch.cached_lens_cpu[i], out[rows], scale)
    except RuntimeError as e:  # a shape or build this cuDNN refuses: the Triton kernel writes those rows again
        cudnn_prefill_failed(e)
        return set()
    return set(long)
