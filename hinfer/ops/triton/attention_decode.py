"""Split-KV (flash-decoding) paged attention for sequences with few new tokens: decode and k+1 verification.

Grid (B, Hkv, SPLITS). One program takes all G = H/Hkv query heads of a kv group and all (<= Q_MAX) new
tokens of one sequence as the rows of one tile (row m = token m // G, head m % G), so each K/V tile is read
once per group. The kv range [0, kv_len) is cut into SPLITS contiguous runs of BLOCK_N-token blocks; each
program writes its rows' partial output and log-sum-exp (base 2) and `_combine_kernel` merges the splits.
With SPLITS == 1 the first kernel writes the normalised output directly.

The grid depends only on static shapes (B, page_table width, Q_MAX); lengths are read from device tensors
inside the kernel, so the launch can be captured in a CUDA graph and replayed with other lengths. The split
count is a runtime argument (one compiled kernel serves every batch size); only SPLITS == 1 (DIRECT) and
the combine kernel's power-of-two bucket are compile-time.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from hinfer.kv_format import kv_format_name
from hinfer.ops.kv_cache import cache_format
from hinfer.ops.triton.attention_common import attend_block, cache_args, int8_codes, quantize_rows_int8
from hinfer.ops.triton.common import cast, interpreted, num_sms, pdl_kwargs, pdl_start
from hinfer.ops.triton.tiles.attention import decode_config, decode_rows


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, op_ptr, lse_ptr,
    pt_ptr, cached_ptr, qlens_ptr, cu_ptr, n_heads, n_splits,
    sqt, sqh, skp, skt, skh, svp, svt, svh, sot, soh, s_pt,
    qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh,
    G: tl.constexpr, Q_MAX: tl.constexpr, M_PAD: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr, DIRECT: tl.constexpr, EMU: tl.constexpr,
    K_FMT: tl.constexpr, V_FMT: tl.constexpr, PDL: tl.constexpr = False,
    g_ptr=None, sgt=0, sgh=0, GATE: tl.constexpr = False, F16: tl.constexpr = False,
    WORDS: tl.constexpr = False, Q8: tl.constexpr = False,
):  # fmt: skip
    pdl_start(PDL)
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    cached = tl.load(cached_ptr + b)
    qlen = tl.load(qlens_ptr + b)
    q0 = tl.load(cu_ptr + b)
    kv_len = cached + qlen
    dt: tl.constexpr = tl.float16 if F16 else q_ptr.dtype.element_ty  # F16: the tile's f16 (1-byte KV formats)

    m = tl.arange(0, M_PAD)
    j = m // G
    head = kvh * G + m % G
    row_ok = (m < G * Q_MAX) & (j < qlen)
    q_ok = row_ok
    if not DIRECT:  # the split count follows the page table's width (static under a graph), so at a short depth
        # most splits hold no keys: those read no queries and write only their -inf log-sum-exp (the combine
        # skips them)
        q_ok = row_ok & (split * tl.cdiv(tl.cdiv(kv_len, BLOCK_N), n_splits) < tl.cdiv(kv_len, BLOCK_N))
    tok = (q0 + j).to(tl.int64)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + tok[:, None] * sqt + head[:, None] * sqh + d[None, :], mask=q_ok[:, None], other=0.0)
    q_scale = 1.0
    if Q8:  # int8 keys: the queries rounded to int8 per row, the scores on int8 tensor cores
        q, q_scale = quantize_rows_int8(q.to(tl.float32), EMU)
    elif EMU:
        q = q.to(tl.float32)
    else:
        q = q.to(dt)
    qpos = cached + j

    n_blocks = tl.cdiv(kv_len, BLOCK_N)
    per = tl.cdiv(n_blocks, n_splits)
    lo = split * per
    hi = tl.minimum(lo + per, n_blocks)
    m_i = tl.full([M_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([M_PAD], tl.float32)
    acc = tl.zeros([M_PAD, D], tl.float32)
    pt_row = pt_ptr + b.to(tl.int64) * s_pt
    if EMU:
        blk = lo
        while blk < hi:
            m_i, l_i, acc = attend_block(
                blk * BLOCK_N, q, qpos, m_i, l_i, acc, pt_row, kv_len, k_ptr, v_ptr, skp, skt, kvh * skh,
                svp, svt, kvh * svh, qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
                dt, D, PAGE, BLOCK_N, EMU, True, True, K_FMT, V_FMT, False, WORDS, Q8, q_scale,
            )  # fmt: skip
            blk += 1
    else:
        for blk in range(lo, hi):
            m_i, l_i, acc = attend_block(
                blk * BLOCK_N, q, qpos, m_i, l_i, acc, pt_row, kv_len, k_ptr, v_ptr, skp, skt, kvh * skh,
                svp, svt, kvh * svh, qk_scale, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
                dt, D, PAGE, BLOCK_N, EMU, True, True, K_FMT, V_FMT, False, WORDS, Q8, q_scale,
            )  # fmt: skip

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    if DIRECT:  # one split: normalise and write the output here
        o_off = tok[:, None] * sot + head[:, None] * soh + d[None, :]
        g_off = tok[:, None] * sgt + head[:, None] * sgh + d[None, :]
        y = _gated(out, g_ptr, g_off, row_ok[:, None], o_ptr.dtype.element_ty, EMU, GATE)
        tl.store(o_ptr + o_off, y, mask=row_ok[:, None])
    else:
        idx = (tok * n_heads + head) * n_splits + split  # partials are [T, H, splits, (D)] fp32
        tl.store(op_ptr + idx[:, None] * D + d[None, :], out, mask=row_ok[:, None] & (lo < hi))
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + idx, lse, mask=row_ok)


@triton.jit
def _gated(out, g_ptr, g_off, mask, dt: tl.constexpr, EMU: tl.constexpr, GATE: tl.constexpr):
    """The fp32 attention output in dt; with GATE times sigmoid(gate), rounded as activation.sigmoid_gate rounds
    it (the output and sigmoid(gate) to dt first, then their product): the model's gated attention in the same
    launch."""
    y = cast(out, dt, EMU)
    if GATE:
        g = tl.load(g_ptr + g_off, mask=mask, other=0.0).to(tl.float32)
        s = cast(1.0 / (1.0 + tl.exp(-g)), dt, EMU).to(tl.float32)
        y = cast(y.to(tl.float32) * s, dt, EMU)
    return y


MERGE_CHUNK = tl.constexpr(8)  # splits a combine program merges at once (8 rows of 256 fp32: 16 values a thread)


@triton.jit
def _combine_kernel(
    op_ptr, lse_ptr, o_ptr, n_heads, n_splits, sot, soh,
    D: tl.constexpr, S_PAD: tl.constexpr, EMU: tl.constexpr, PDL: tl.constexpr = False,
    g_ptr=None, sgt=0, sgh=0, GATE: tl.constexpr = False,
):  # fmt: skip
    """The splits' partial rows merged MERGE_CHUNK at a time, up to the last split with keys: a split whose
    log-sum-exp is -inf (no keys, or none this row sees) adds nothing and its partial row is never read (the
    decode kernel does not write it)."""
    pdl_start(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    base = (t * n_heads + h) * n_splits
    s = tl.arange(0, S_PAD)
    lse = tl.load(lse_ptr + base + s, mask=s < n_splits, other=float("-inf"))
    mx = tl.max(lse, axis=0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    denom = tl.sum(tl.exp2(lse - mx), axis=0)
    live = tl.max(tl.where(lse > float("-inf"), s + 1, 0), axis=0)  # splits past the last with keys: none
    d = tl.arange(0, D)
    c = tl.arange(0, MERGE_CHUNK)
    acc = tl.zeros([D], tl.float32)
    if EMU:  # the interpreter's range() cannot take a runtime scalar (numpy >= 2.4)
        i = 0
        while i < live:
            acc = _merge_chunk(acc, op_ptr, lse_ptr, base, i + c, n_splits, mx, d, D)
            i += MERGE_CHUNK
    else:
        for i in range(0, live, MERGE_CHUNK):
            acc = _merge_chunk(acc, op_ptr, lse_ptr, base, i + c, n_splits, mx, d, D)
    out = acc / tl.where(denom > 0.0, denom, 1.0)
    y = _gated(out, g_ptr, t * sgt + h * sgh + d, d >= 0, o_ptr.dtype.element_ty, EMU, GATE)
    tl.store(o_ptr + t * sot + h * soh + d, y)


@triton.jit
def _merge_chunk(acc, op_ptr, lse_ptr, base, i, n_splits, mx, d, D: tl.constexpr):
    """acc + the partial rows of splits `i` weighted by exp2(lse - mx); rows of -inf splits are not read."""
    lse = tl.load(lse_ptr + base + i, mask=i < n_splits, other=float("-inf"))
    rows = tl.load(op_ptr + (base + i)[:, None] * D + d[None, :], mask=(lse > float("-inf"))[:, None], other=0.0)
    return acc + tl.sum(tl.exp2(lse - mx)[:, None] * rows, axis=0)


def decode_cache_args(k_cache: torch.Tensor, v_cache: torch.Tensor, q8: bool = False) -> tuple[tuple, tuple]:
    """attention_common.cache_args of K and V. sm_90 registers at the default tiles: int8 K and V 168 with K
    scaled in the tile (198 after the dot); k8v4 168 with K scaled after the dot (182 in the tile); int8 V
    after the dot (the rows are few here). int4 K and V (both in the tile) 138. q8 (int8 keys scored on int8
    tensor cores): the key scales after the dot."""
    k_in_tile = cache_format(v_cache).pack == 1 and not q8
    return cache_args(k_cache, int8_in_tile=k_in_tile), cache_args(v_cache)


WAVE_FILL = 0.95  # the share of its last wave a split decode launch fills


@functools.lru_cache(maxsize=1024)  # a few shapes a run; the search stays off the launch path
def decode_splits(
    n_seqs: int, n_kv: int, max_kv_tokens: int, block_n: int, device: torch.device, ctas_per_sm: int = 4
) -> int:
    """The fewest splits of the KV range whose n_seqs * n_kv * splits programs fill their last wave of
    ctas_per_sm programs an SM to WAVE_FILL; a function of static shapes only. A launch one wave and a few
    programs long waits on that tail: eight lanes x 4 KV heads at 3 an SM took 13 splits (416 programs on 396
    places) and ran 25-45% slower per format than at 33 splits (bench/RESULTS.md, 2026-12-04). A launch that
    fills a wave without splitting keeps one split (the sequences' own lengths vary more than a wave's tail)."""
    sms = num_sms(device.index or 0) if device.type == "cuda" else 132
    wave, work = ctas_per_sm * sms, max(1, n_seqs * n_kv)
    most = max(1, min(triton.cdiv(max_kv_tokens, block_n), 256))
    if work >= wave:
        return 1
    for splits in range(1, most + 1):
        programs = work * splits
        if programs >= WAVE_FILL * triton.cdiv(programs, wave) * wave:
            return splits
    return most


def paged_decode(
    q: torch.Tensor,  # [T, H, D]
    k_cache: torch.Tensor,  # [P, page, Hkv, D] token rows in the cache's format (int8: scales after them)
    v_cache: torch.Tensor,
    out: torch.Tensor,  # [T, H, D], rows of these sequences are written
    page_table: torch.Tensor,  # [B, max_pages] int32
    cached_lens: torch.Tensor,
    q_lens: torch.Tensor,
    cu_q_lens: torch.Tensor,
    scale: float,
    n_seqs: int,  # the batch's leading n_seqs sequences (the scheduler puts decode/verify lanes first)
    n_tokens: int,  # their tokens: rows 0 .. n_tokens of q (static under a CUDA graph)
    q_max: int,  # static bound on any of these sequences' q_len
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    ctas_per_sm: int | None = None,
    f16: bool | None = None,
    gate: torch.Tensor | None = None,  # [T, H, D], last dim contiguous: out = attention * sigmoid(gate)
    words: bool | None = None,  # tiles read by 32-bit words (load_tile's WORDS); None: the tile's
    q8: bool | None = None,  # int8 keys: scores on int8-rounded queries (DecodeTile.q8); None: the tile's
) -> None:
    n_heads, d = q.shape[1], q.shape[2]
    gate_args = dict(g_ptr=q, sgt=0, sgh=0, GATE=False)
    if gate is not None:
        assert gate.shape == q.shape and gate.stride(-1) == 1, "gate: [T, H, D] with a contiguous last dim"
        gate_args = dict(g_ptr=gate, sgt=gate.stride(0), sgh=gate.stride(1), GATE=True)
    page, n_kv = k_cache.shape[1], k_cache.shape[2]
    g = n_heads // n_kv
    m_pad = decode_rows(q_max, g)
    k_store, v_store = cache_format(k_cache), cache_format(v_cache)
    cfg = decode_config(q_max, g, d, kv_format_name(k_store, v_store))
    # the f16 form: 1-byte caches under a 16-bit model (an fp32 model keeps fp32 dots)
    one_byte = k_store.elem_bytes == 1 and v_store.elem_bytes == 1 and q.element_size() == 2
    emu = interpreted(_decode_kernel)
    block_n = block_n or (min(16, page) if emu else cfg.block_n)
    if num_splits is None:
        per_sm = ctas_per_sm or cfg.ctas_per_sm
        num_splits = decode_splits(n_seqs, n_kv, page_table.shape[1] * page, block_n, q.device, per_sm)
    if num_splits > 1:
        # every row of these tokens gets one entry per split (empty splits write lse = -inf)
        part = torch.empty((n_tokens, n_heads, num_splits, d), dtype=torch.float32, device=q.device)
        lse = torch.empty((n_tokens, n_heads, num_splits), dtype=torch.float32, device=q.device)
    else:
        part = lse = out  # unused
    q8 = (cfg.q8 if q8 is None else q8) and int8_codes(k_store)
    (ks, ksp, kst, ksh, k_fmt), (vs, vsp, vst, vsh, v_fmt) = decode_cache_args(k_cache, v_cache, q8)
    _decode_kernel[(n_seqs, n_kv, num_splits)](
        q, k_cache, v_cache, out, part, lse,
        page_table, cached_lens, q_lens, cu_q_lens, n_heads, num_splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), page_table.stride(0),
        scale * 1.4426950408889634, ks, ksp, kst, ksh, vs, vsp, vst, vsh,
        G=g, Q_MAX=q_max, M_PAD=m_pad, D=d, PAGE=page, BLOCK_N=block_n, DIRECT=num_splits == 1, EMU=emu,
        K_FMT=k_fmt, V_FMT=v_fmt, F16=(cfg.f16 if f16 is None else f16) and one_byte,
        WORDS=cfg.words if words is None else words, Q8=q8,
        num_warps=num_warps or cfg.num_warps, num_stages=num_stages or cfg.num_stages, **pdl_kwargs(q),
        **(gate_args if num_splits == 1 else {}),
    )  # fmt: skip
    if num_splits > 1:
        _combine_kernel[(n_tokens, n_heads)](
            part, lse, out, n_heads, num_splits, out.stride(0), out.stride(1),
            D=d, S_PAD=triton.next_power_of_2(num_splits), EMU=emu, num_warps=4, **pdl_kwargs(q), **gate_args,
        )  # fmt: skip
