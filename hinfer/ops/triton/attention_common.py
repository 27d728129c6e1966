"""Pieces shared by the paged attention kernels: cache addressing, the K/V tile load, one online-softmax step.

Loops over key blocks are `for ... in range(lo, hi)` on the GPU (Triton pipelines those) and a `while` loop
under the interpreter, whose range() cannot take a loaded scalar with numpy >= 2.4.

The KV cache is [num_pages, page_size, n_kv, head_dim] per layer; a sequence's token n lives in page
page_table[b, n // PAGE] at row n % PAGE. `load_kv` is the single place a cache tile is read and converted
to the compute dtype (bf16 / fp8 / int8 codes: exact in bf16). An int8 cache (SCALED) also has an fp32 scale
per token and head (hinfer.kv_format), which `attend_block` reads beside the tile; the scales are applied to
the [M, N] scores and probabilities rather than the [N, D] tile: s = (q . k_codes) * k_scale, and
acc += (p * v_scale) @ v_codes, so the tiles go to the tensor cores as they are loaded.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.kv_cache import kv_scales
from hinfer.ops.triton.norm import cast


def scale_args(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, int, bool]:
    """(k scales, v scales, page stride, token stride, SCALED) kernel arguments of a layer's caches; unscaled
    formats pass the caches themselves as never-read placeholders."""
    ks, vs = kv_scales(k_cache), kv_scales(v_cache)
    if ks is None or vs is None:
        return k_cache, v_cache, 0, 0, False
    assert ks.stride() == vs.stride() and ks.stride(-1) == 1
    return ks, vs, ks.stride(0), ks.stride(1), True


@triton.jit
def kv_page_rows(pt_row_ptr, n0, n, mask, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """(page id int64 [BLOCK_N] or scalar, row in page [BLOCK_N]) of tokens n = n0 + arange(BLOCK_N)."""
    if BLOCK_N <= PAGE:
        # n0 is a multiple of BLOCK_N and PAGE % BLOCK_N == 0: the whole block sits in one page
        page = tl.load(pt_row_ptr + n0 // PAGE).to(tl.int64)
        return page, n0 % PAGE + tl.arange(0, BLOCK_N)
    else:
        pages = tl.load(pt_row_ptr + n // PAGE, mask=mask, other=0).to(tl.int64)
        return pages, n % PAGE


@triton.jit
def load_kv(ptr, page, row, stride_p, stride_t, head_off, d, mask, dt: tl.constexpr, EMU: tl.constexpr):
    """One [BLOCK_N, D] tile of a kv head, converted to the compute dtype `dt` (fp32 under the interpreter,
    whose dot cannot take bf16)."""
    off = page * stride_p + row * stride_t + head_off
    x = tl.load(ptr + off[:, None] + d[None, :], mask=mask[:, None], other=0.0)
    if EMU:  # straight to fp32: the interpreter's int8 -> bf16 conversion is wrong
        return x.to(tl.float32)
    return x.to(dt)


@triton.jit
def load_scales(ptr, page, row, stride_p, stride_t, head, mask):
    """[BLOCK_N] fp32 scales of one kv head's tokens (0 where masked)."""
    return tl.load(ptr + page * stride_p + row * stride_t + head, mask=mask, other=0.0)


@triton.jit
def softmax_step(
    q, k, v, m_i, l_i, acc, valid, qk_scale, k_scale, v_scale,
    dt: tl.constexpr, EMU: tl.constexpr, MASKED: tl.constexpr, SAFE: tl.constexpr, SCALED: tl.constexpr,
):  # fmt: skip
    """One online-softmax update (base 2) of rows q [M, D] with keys k and values v [N, D].

    `valid` [M, N] masks keys when MASKED. SAFE guards rows that have seen no key yet (m == -inf), which
    only happens in split-KV decode where a split can lie past a row's causal limit. SCALED: k and v are int8
    codes and k_scale, v_scale [N] their per-token scales.
    """
    # fp32 models get true fp32 dots (Triton would use TF32); bf16/fp16 use the tensor cores as they are
    prec: tl.constexpr = "ieee" if dt == tl.float32 else "tf32"
    if SCALED:
        s = tl.dot(q, tl.trans(k), input_precision=prec) * (k_scale * qk_scale)[None, :]
    else:
        s = tl.dot(q, tl.trans(k), input_precision=prec) * qk_scale
    if MASKED:
        s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    if SAFE:
        m_new_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new_use = m_new
    alpha = tl.exp2(m_i - m_new_use)
    p = tl.exp2(s - m_new_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if SCALED:
        p = p * v_scale[None, :]
    p_in = cast(p, dt, EMU)
    if EMU:
        p_in = p_in.to(tl.float32)
    acc = tl.dot(p_in, v, acc * alpha[:, None], input_precision=prec)
    return m_new, l_i, acc


@triton.jit
def attend_block(
    n0, q, qpos, m_i, l_i, acc, pt_row, kv_end,
    k_ptr, v_ptr, skp, skt, k_head, svp, svt, v_head, d, qk_scale,
    ks_ptr, vs_ptr, sp, st, kvh,
    dt: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, EMU: tl.constexpr,
    MASKED: tl.constexpr, SAFE: tl.constexpr, SCALED: tl.constexpr,
):  # fmt: skip
    """Keys n0 .. n0 + BLOCK_N of one sequence (those < kv_end; causal against qpos when MASKED). SCALED: the
    scales of kv head kvh are at ks_ptr / vs_ptr + page * sp + row * st + kvh (K and V alike)."""
    n = n0 + tl.arange(0, BLOCK_N)
    kv_ok = n < kv_end
    page, row = kv_page_rows(pt_row, n0, n, kv_ok, PAGE, BLOCK_N)
    k = load_kv(k_ptr, page, row, skp, skt, k_head, d, kv_ok, dt, EMU)
    v = load_kv(v_ptr, page, row, svp, svt, v_head, d, kv_ok, dt, EMU)
    if SCALED:
        k_scale = load_scales(ks_ptr, page, row, sp, st, kvh, kv_ok)
        v_scale = load_scales(vs_ptr, page, row, sp, st, kvh, kv_ok)
    else:
        k_scale = qk_scale
        v_scale = qk_scale
    valid = (n[None, :] <= qpos[:, None]) & kv_ok[None, :]
    return softmax_step(q, k, v, m_i, l_i, acc, valid, qk_scale, k_scale, v_scale, dt, EMU, MASKED, SAFE, SCALED)
