"""Flash-attention-style causal paged attention for prefill and extend chunks (varlen via cu_q_lens).

Grid (H, q blocks, B x SPLITS): program (h, r, b, s) takes BLOCK_M new tokens of sequence b for query head h.
Axis 0 is the head so the G heads sharing a kv head run side by side and hit the same K/V tiles in L2; q blocks
are visited last-first (the heaviest causal rows start earliest). Keys run in two phases: blocks entirely
before the first row's position need no mask; the diagonal blocks (< BLOCK_M + BLOCK_N keys) are masked.
A few new tokens over a long cached prefix (a conversation's next turn) make few programs, each walking the
whole prefix: the keys are then cut into SPLITS contiguous runs (split-KV, as the decode kernel), each
program writes its rows' partial output and log-sum-exp, and the decode kernel's combine merges them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.kv_format import kv_format_name
from hinfer.ops.kv_cache import cache_format
from hinfer.ops.triton.attention_common import attend_block, cache_args, int8_codes, quantize_rows_int8
from hinfer.ops.triton.attention_decode import _combine_kernel
from hinfer.ops.triton.common import cast, interpreted, num_sms
from hinfer.ops.triton.tiles.attention import prefill_config


@triton.jit
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    pt_ptr, cached_ptr, qlens_ptr, cu_ptr, seq0,
    sqt, sqh, skp, skt, skh, svp, svt, svh, sot, soh, s_pt,
    qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh,
    G: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EMU: tl.constexpr,
    K_FMT: tl.constexpr, V_FMT: tl.constexpr,
    op_ptr=None, lse_ptr=None, n_heads=1, n_splits=1, tok0=0, DIRECT: tl.constexpr = True,
    LAZY: tl.constexpr = False, F16: tl.constexpr = False, WORDS: tl.constexpr = False, Q8: tl.constexpr = False,
):  # fmt: skip
    h = tl.program_id(0)
    b = seq0 + tl.program_id(2) // n_splits
    split = tl.program_id(2) % n_splits
    qlen = tl.load(qlens_ptr + b)
    n_mb = tl.cdiv(qlen, BLOCK_M)
    if tl.program_id(1) >= n_mb:
        return
    mb = n_mb - 1 - tl.program_id(1)
    cached = tl.load(cached_ptr + b)
    q0 = tl.load(cu_ptr + b)
    kvh = h // G
    dt: tl.constexpr = tl.float16 if F16 else q_ptr.dtype.element_ty  # F16: the tile's f16 (1-byte KV formats)

    i = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = i < qlen
    qpos = cached + i
    tok = (q0 + i).to(tl.int64)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + tok[:, None] * sqt + h * sqh + d[None, :], mask=row_ok[:, None], other=0.0)
    q_scale = 1.0
    if Q8:  # int8 keys: the queries rounded to int8 per row, the scores on int8 tensor cores
        q, q_scale = quantize_rows_int8(q.to(tl.float32), EMU)
    elif EMU:
        q = q.to(tl.float32)
    else:
        q = q.to(dt)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    pt_row = pt_ptr + b.to(tl.int64) * s_pt
    full_hi = (cached + mb * BLOCK_M) // BLOCK_N * BLOCK_N  # keys every row of this block sees
    kv_hi = cached + tl.minimum(qlen, (mb + 1) * BLOCK_M)  # one past the last row's position
    per = tl.cdiv(tl.cdiv(kv_hi, BLOCK_N), n_splits) * BLOCK_N  # this split's keys: [lo, hi)
    lo = split * per
    hi = tl.minimum(lo + per, kv_hi)
    if EMU:  # one loop; the phase flag is a runtime bool here, which only the interpreter accepts
        n0 = lo
        while n0 < hi:
            m_i, l_i, acc = attend_block(
                n0, q, qpos, m_i, l_i, acc, pt_row, kv_hi, k_ptr, v_ptr, skp, skt, kvh * skh,
                svp, svt, kvh * svh, qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
                dt, D, PAGE, BLOCK_N, EMU, n0 >= full_hi, not DIRECT, K_FMT, V_FMT, LAZY, WORDS, Q8, q_scale,
            )  # fmt: skip
            n0 += BLOCK_N
    else:
        for n0 in range(lo, tl.minimum(hi, full_hi), BLOCK_N):
            m_i, l_i, acc = attend_block(
                n0, q, qpos, m_i, l_i, acc, pt_row, kv_hi, k_ptr, v_ptr, skp, skt, kvh * skh,
                svp, svt, kvh * svh, qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
                dt, D, PAGE, BLOCK_N, EMU, False, False, K_FMT, V_FMT, LAZY, WORDS, Q8, q_scale,
            )  # fmt: skip
        for n0 in range(tl.maximum(lo, full_hi), hi, BLOCK_N):
            m_i, l_i, acc = attend_block(
                n0, q, qpos, m_i, l_i, acc, pt_row, kv_hi, k_ptr, v_ptr, skp, skt, kvh * skh,
                svp, svt, kvh * svh, qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
                dt, D, PAGE, BLOCK_N, EMU, True, not DIRECT, K_FMT, V_FMT, LAZY, WORDS, Q8, q_scale,
            )  # fmt: skip

    if DIRECT:
        out = acc / l_i[:, None]
        o_off = tok[:, None] * sot + h * soh + d[None, :]
        tl.store(o_ptr + o_off, cast(out, o_ptr.dtype.element_ty, EMU), mask=row_ok[:, None])
    else:  # partials [T - tok0, H, splits, (D)] fp32, as the decode kernel's; an empty split writes lse -inf
        has = l_i > 0.0
        out = acc / tl.where(has, l_i, 1.0)[:, None]
        idx = ((tok - tok0) * n_heads + h) * n_splits + split
        tl.store(op_ptr + idx[:, None] * D + d[None, :], out, mask=row_ok[:, None])
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + idx, lse, mask=row_ok)


def prefill_cache_args(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[tuple, tuple]:
    """attention_common.cache_args of K and V. sm_90 at the default tiles: int8 V scaled in the tile keeps 255
    registers without spills (after the dot: 32 B of stack); int8 K after the dot (as the q8 form needs)."""
    return cache_args(k_cache), cache_args(v_cache, int8_in_tile=True)


def paged_prefill(
    q: torch.Tensor,  # [T, H, D]
    k_cache: torch.Tensor,  # [P, page, Hkv, D]
    v_cache: torch.Tensor,
    out: torch.Tensor,  # [T, H, D]
    page_table: torch.Tensor,
    cached_lens: torch.Tensor,
    q_lens: torch.Tensor,
    cu_q_lens: torch.Tensor,
    scale: float,
    seq_start: int,
    n_seqs: int,
    q_max: int,  # the largest q_len of these sequences (sizes the grid)
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    kv_max: int = 0,  # host bound on cached + new tokens of these sequences (0: unknown, no split)
    tok0: int = 0,  # their first token's row, and how many rows they have (for the split partials)
    n_tok: int | None = None,
    num_splits: int | None = None,
    lazy: bool | None = None,  # the lazy rescale (softmax_step; one-pass launches only: the split partials'
    # epilogue beside it spills on sm_90); None: the tile's
    f16: bool | None = None,  # dots in fp16 where both caches hold 1-byte formats (one-pass launches only, as
    # lazy: beside the split partials' epilogue fp8's spills 136 bytes); None: the tile's
    words: bool | None = None,  # tiles read by 32-bit words (load_tile's WORDS); None: the tile's
    q8: bool | None = None,  # int8 keys: scores on int8-rounded queries (PrefillTile.q8); None: the tile's, on
    # one-pass launches (beside the split partials' epilogue int8's spills 128 bytes)
) -> None:
    n_heads, d = q.shape[1], q.shape[2]
    page, n_kv = k_cache.shape[1], k_cache.shape[2]
    k_store, v_store = cache_format(k_cache), cache_format(v_cache)
    cfg = prefill_config(q_max, n_heads // n_kv, d, kv_format_name(k_store, v_store))
    # the f16 form: 1-byte caches under a 16-bit model (an fp32 model keeps fp32 dots)
    one_byte = k_store.elem_bytes == 1 and v_store.elem_bytes == 1 and q.element_size() == 2
    emu = interpreted(_prefill_kernel)
    block_m = block_m or (16 if emu else cfg.block_m)
    block_n = block_n or (16 if emu else cfg.block_n)
    programs = n_heads * triton.cdiv(q_max, block_m) * n_seqs
    splits = num_splits or prefill_splits(programs, kv_max, block_n, q.device)
    grid = (n_heads, triton.cdiv(q_max, block_m), n_seqs * splits)
    n_tok = q.shape[0] - tok0 if n_tok is None else n_tok
    if splits > 1:
        part = torch.empty((n_tok, n_heads, splits, d), dtype=torch.float32, device=q.device)
        lse = torch.empty((n_tok, n_heads, splits), dtype=torch.float32, device=q.device)
    else:
        part = lse = out  # unused
    (ks, ksp, kst, ksh, k_fmt), (vs, vsp, vst, vsh, v_fmt) = prefill_cache_args(k_cache, v_cache)
    q8 = (cfg.q8 and splits == 1 if q8 is None else q8) and int8_codes(k_store)
    _prefill_kernel[grid](
        q, k_cache, v_cache, out,
        page_table, cached_lens, q_lens, cu_q_lens, seq_start,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), page_table.stride(0),
        scale * 1.4426950408889634, ks, ksp, kst, ksh, vs, vsp, vst, vsh,
        G=n_heads // n_kv, D=d, PAGE=page, BLOCK_M=block_m, BLOCK_N=block_n, EMU=emu,
        K_FMT=k_fmt, V_FMT=v_fmt, op_ptr=part, lse_ptr=lse, n_heads=n_heads, n_splits=splits, tok0=tok0,
        DIRECT=splits == 1, LAZY=(cfg.lazy if lazy is None else lazy) and splits == 1,
        F16=(cfg.f16 if f16 is None else f16) and one_byte and splits == 1,
        WORDS=cfg.words if words is None else words, Q8=q8,
        num_warps=num_warps or cfg.num_warps, num_stages=num_stages or cfg.num_stages,
    )  # fmt: skip
    if splits > 1:
        o = out[tok0 : tok0 + n_tok]
        _combine_kernel[(n_tok, n_heads)](
            part, lse, o, n_heads, splits, o.stride(0), o.stride(1),
            D=d, S_PAD=triton.next_power_of_2(splits), EMU=emu, num_warps=4,
        )  # fmt: skip


def prefill_splits(programs: int, kv_max: int, block_n: int, device: torch.device) -> int:
    """Key splits for a prefill launch of `programs` programs over up to `kv_max` keys: enough to cover the SMs
    twice when the launch alone would not, each split keeping >= 16 key blocks; 1 otherwise (and on the CPU)."""
    if device.type != "cuda" or kv_max < 32 * block_n:
        return 1
    sms = num_sms(device.index or 0)
    if programs >= 2 * sms:
        return 1
    return max(1, min(triton.cdiv(2 * sms, programs), kv_max // (16 * block_n), 64))
