"""Gated full attention over a paged KV cache.

`qk_norm_rope_write`: per-head zero-centred RMSNorm on q and k, partial RoPE, and the KV-cache write of the
new tokens (one op so the GPU path can fuse it; int8 / int4 caches are quantized as they are written; an int4
K cache stores Hadamard-rotated keys, and the queries come back rotated alike, hinfer.kv_format).
`paged_attention`: causal attention of each sequence's new tokens over its cached prefix plus themselves
(prefill, extend, decode and k+1-token verification are one op), reading the cache in its format
(hinfer.kv_format).
"""

from __future__ import annotations

import torch

from hinfer.batch import ForwardBatch
from hinfer.ops.activation import sigmoid_gate
from hinfer.ops.dispatch import use_triton
from hinfer.ops.kv_cache import read_kv, rotate_for_cache, write_kv
from hinfer.ops.norm import rms_norm_ref
from hinfer.ops.rope import apply_rope_ref, rope_cos_sin


def qk_norm_rope_write_ref(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, Hkv, D]
    v: torch.Tensor,  # [T, Hkv, D]
    q_norm_w: torch.Tensor,
    k_norm_w: torch.Tensor,
    eps: float,
    positions: torch.Tensor,  # [T], or [3, T] (t, h, w) when the batch holds image tokens
    inv_freq: torch.Tensor,  # [R/2] fp32
    k_cache: torch.Tensor,  # [P, page, Hkv, D] one layer's token rows, in its format (hinfer.kv_format)
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [T]
    attn_factor: float = 1.0,  # YaRN's cos/sin scale
    freq_axes: torch.Tensor | None = None,  # [R/2]: the stream of each frequency, for [3, T] positions
) -> torch.Tensor:
    q = rms_norm_ref(q, q_norm_w, eps)
    k = rms_norm_ref(k, k_norm_w, eps)
    cos, sin = rope_cos_sin(positions, inv_freq, q.dtype, attn_factor, freq_axes)
    q = apply_rope_ref(q, cos, sin)
    k = apply_rope_ref(k, cos, sin)
    q, k = rotate_for_cache(q, k, k_cache)
    write_kv(k_cache, slot_mapping, k)
    write_kv(v_cache, slot_mapping, v)
    return q


def queries_int8_ref(q: torch.Tensor) -> torch.Tensor:
    """Queries [..., D] rounded to int8 per row (scale max |q| / 127, 1 for a zero row; halves away from zero),
    in fp32: what the decode kernel's q8 form scores int8 keys with (attention_common.quantize_rows_int8)."""
    qf = q.float()
    s = qf.abs().amax(-1, keepdim=True) / 127
    s = torch.where(s > 0, s, torch.ones_like(s))
    y = qf / s
    return torch.where(y >= 0, torch.floor(y + 0.5), -torch.floor(0.5 - y)) * s


def paged_attention_ref(
    q: torch.Tensor,  # [T, H, D] (already normed and rotated)
    k_cache: torch.Tensor,  # [P, page, Hkv, D]
    v_cache: torch.Tensor,
    batch: ForwardBatch,
    scale: float,
) -> torch.Tensor:
    out = torch.empty_like(q)
    n_heads, n_kv = q.shape[1], k_cache.shape[2]
    ps = batch.page_size
    start = 0
    for b, (cached, n) in enumerate(zip(batch.cached_lens_cpu, batch.q_lens_cpu)):
        kv_len = cached + n
        pages = batch.page_table[b, : (kv_len + ps - 1) // ps].long()
        k = read_kv(k_cache, pages, kv_len, q.dtype)
        v = read_kv(v_cache, pages, kv_len, q.dtype)
        k = k.repeat_interleave(n_heads // n_kv, dim=1)
        v = v.repeat_interleave(n_heads // n_kv, dim=1)
        qb = q[start : start + n]
        scores = torch.einsum("qhd,khd->hqk", qb, k) * scale
        qpos = torch.arange(cached, kv_len, device=q.device)[:, None]
        kpos = torch.arange(kv_len, device=q.device)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out[start : start + n] = torch.einsum("hqk,khd->qhd", probs, v)
        start += n
    return out


def qk_norm_rope_write(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_norm_w: torch.Tensor,
    k_norm_w: torch.Tensor,
    eps: float,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    attn_factor: float = 1.0,
    freq_axes: torch.Tensor | None = None,
) -> torch.Tensor:
    args = (q, k, v, q_norm_w, k_norm_w, eps, positions, inv_freq, k_cache, v_cache, slot_mapping)
    args += (attn_factor, freq_axes)
    if use_triton(q):
        from hinfer.ops.triton import attention as ta

        return ta.qk_norm_rope_write(*args)
    return qk_norm_rope_write_ref(*args)


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: ForwardBatch, scale: float,
    gate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of q over the paged cache; with `gate` ([T, H, D]) the output times sigmoid(gate), as
    sigmoid_gate computes it (one launch fewer at decode, where the Triton kernels apply it as they write)."""
    if use_triton(q):
        from hinfer.ops.triton import attention as ta

        return ta.paged_attention(q, k_cache, v_cache, batch, scale, gate)
    out = paged_attention_ref(q, k_cache, v_cache, batch, scale)
    return out if gate is None else sigmoid_gate(out, gate)
