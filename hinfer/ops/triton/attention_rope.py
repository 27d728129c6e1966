"""Fused per-head q/k RMSNorm + partial NeoX RoPE + paged KV-cache write (one program per token).

Matches hinfer.ops.attention.qk_norm_rope_write_ref rounding for rounding: the normalised head is rounded
to the model dtype, cos/sin are computed in fp32 from positions * inv_freq (times YaRN's attention factor)
and rounded, and x*cos, rot*sin and their sum are each rounded, as the reference's bf16 torch ops do. The
rotate-half partner of column d is read again from memory (same cache lines) rather than shuffled in
registers. int8 / int4 caches get codes and scales computed as hinfer.ops.kv_cache does; an int4 K cache gets
H k, and q comes out as H q / D (hinfer.ops.kv_cache.rotate_for_cache), by the same butterflies in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.attention_common import GROUP4, cache_args
from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start

# 2*pi split (Cody-Waite) for an accurate range reduction of the fp32 angle before sin/cos, whatever precision
# the hardware sin/cos has on large arguments: _C1 = 25/4 and _C2 = 17/512 have 5 significant bits, so k * _C1
# and k * _C2 are exact for k < 2**19, i.e. angles up to 3.3M rad (positions up to 3.3M at frequency 1: YaRN's
# 1M window included); _C3 + _C4 carry the rest of 2*pi to ~1e-20.
_C1: tl.constexpr = tl.constexpr(6.25)
_C2: tl.constexpr = tl.constexpr(0.033203125)
_C3: tl.constexpr = tl.constexpr(-1.781781975296326e-05)
_C4: tl.constexpr = tl.constexpr(-6.608047442568932e-13)
_INV_2PI: tl.constexpr = tl.constexpr(0.15915494309189535)


@triton.jit
def _norm_rope_heads(
    x_ptr, row_off, hmask, w_ptr, cos, sin, d, eps,
    D: tl.constexpr, R_HALF: tl.constexpr, dt: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    """Rows x [NH, D] at x_ptr + row_off: zero-centred RMSNorm then rotate the first 2*R_HALF dims; fp32."""
    mask = hmask[:, None]
    x = tl.load(x_ptr + row_off[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)
    w = tl.load(w_ptr + d).to(tl.float32)
    y = cast(x * rstd[:, None] * (1.0 + w[None, :]), dt, EMU).to(tl.float32)
    partner = tl.where(d < R_HALF, d + R_HALF, tl.where(d < 2 * R_HALF, d - R_HALF, d))
    xp = tl.load(x_ptr + row_off[:, None] + partner[None, :], mask=mask, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner).to(tl.float32)
    yp = cast(xp * rstd[:, None] * (1.0 + wp[None, :]), dt, EMU).to(tl.float32)
    rot = tl.where((d < R_HALF)[None, :], -yp, yp)
    out = cast(y * cos[None, :], dt, EMU).to(tl.float32) + cast(rot * sin[None, :], dt, EMU).to(tl.float32)
    return tl.where((d < 2 * R_HALF)[None, :], out, y)


@triton.jit
def _hadamard(x, R: tl.constexpr, D: tl.constexpr, LOG_D: tl.constexpr):
    """H x of rows x [R, D] fp32 (H the Sylvester Hadamard matrix), butterfly for butterfly as
    hinfer.ops.kv_cache.hadamard: LOG_D times, the pairs (a_i + b_i, a_i - b_i) of the halves a, b
    interleaved: the same fp32 additions in the same order on both sides, so the values (and codes) agree."""
    for _ in tl.static_range(LOG_D):
        a, b = tl.split(tl.permute(tl.reshape(x, [R, 2, D // 2]), (0, 2, 1)))
        x = tl.reshape(tl.join(a + b, a - b), [R, D])
    return x


@triton.jit
def _quantize(x, QMAX: tl.constexpr):
    """x [R, G] fp32 -> (codes round-half-up(x / s) in [-QMAX, QMAX] as fp32, s = amax / QMAX per row; 0 for
    an all-zero row), as hinfer.ops.kv_cache.quantize_int8 / quantize_int4. IEEE divisions (div_rn): Triton's
    `/` is the approximate div.full on the GPU, and an ulp in 1 / s moves codes that sit on a .5."""
    s = tl.math.div_rn(tl.max(tl.abs(x), axis=1), QMAX)
    inv = tl.where(s > 0.0, tl.math.div_rn(1.0, tl.where(s > 0.0, s, 1.0)), 0.0)
    q = tl.floor(x * inv[:, None] + 0.5)
    return tl.minimum(tl.maximum(q, -QMAX), QMAX), s


@triton.jit
def _store_kv(
    c_ptr, row, x, hmask, s_ptr, s_row,
    NH: tl.constexpr, D: tl.constexpr, FMT: tl.constexpr,
):  # fmt: skip
    """Rows x [NH, D] (model-dtype values in fp32) into a cache in its storage format (attention_common
    codes): row [NH] is each head's row offset in the cache, s_row [NH] in its scales."""
    if FMT == 2:  # int4: groups of GROUP4, nibble pairs (2j low, 2j + 1 high), codes + 8
        q, s = _quantize(tl.reshape(x, [NH * (D // GROUP4), GROUP4]), 7.0)
        u = tl.reshape(q + 8.0, [NH, D // 2, 2]).to(tl.int32)
        lo, hi = tl.split(u)
        j = tl.arange(0, D // 2)
        tl.store(c_ptr + row[:, None] + j[None, :], (lo | (hi << 4)).to(tl.uint8), mask=hmask[:, None])
        g = tl.arange(0, D // GROUP4)
        tl.store(s_ptr + s_row[:, None] + g[None, :], tl.reshape(s, [NH, D // GROUP4]), mask=hmask[:, None])
    elif FMT == 1:  # int8: one scale per row
        q, s = _quantize(x, 127.0)
        d = tl.arange(0, D)
        tl.store(c_ptr + row[:, None] + d[None, :], q.to(tl.int8), mask=hmask[:, None])
        tl.store(s_ptr + s_row, s, mask=hmask)
    else:
        d = tl.arange(0, D)
        tl.store(c_ptr + row[:, None] + d[None, :], x.to(c_ptr.dtype.element_ty), mask=hmask[:, None])


@triton.jit
def _qk_norm_rope_write_kernel(
    q_ptr, k_ptr, v_ptr, qo_ptr, qw_ptr, kw_ptr, pos_ptr, freq_ptr, kc_ptr, vc_ptr, slot_ptr,
    sqt, sqh, skt, skh, svt, svh,
    skp, sks, skc, svp, svs, svc,
    eps, attn_factor, ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, axes_ptr, s_pos,
    H: tl.constexpr, HKV: tl.constexpr, H_PAD: tl.constexpr, HKV_PAD: tl.constexpr,
    D: tl.constexpr, R_HALF: tl.constexpr, PAGE: tl.constexpr, EMU: tl.constexpr,
    K_FMT: tl.constexpr, V_FMT: tl.constexpr, LOG_D: tl.constexpr, MULTI_AXIS: tl.constexpr = False,
    PDL: tl.constexpr = False,
):  # fmt: skip
    pdl_start(PDL)
    t = tl.program_id(0).to(tl.int64)
    dt = qo_ptr.dtype.element_ty
    d = tl.arange(0, D)

    # cos/sin of column d (freq index d mod R/2), fp32 angle reduced to [-pi, pi] before sin/cos
    rot_col = d < 2 * R_HALF
    freq = tl.load(freq_ptr + d % R_HALF, mask=rot_col, other=0.0)
    if MULTI_AXIS:  # image tokens: positions [3, T] (t, h, w); frequency i turns with stream axes[i]
        ax = tl.load(axes_ptr + d % R_HALF, mask=rot_col, other=0)
        ang = tl.load(pos_ptr + ax * s_pos + t).to(tl.float32) * freq
    else:
        ang = tl.load(pos_ptr + t).to(tl.float32) * freq
    n = tl.floor(ang * _INV_2PI + 0.5)
    r = (((ang - n * _C1) - n * _C2) - n * _C3) - n * _C4
    cos = cast(tl.cos(r) * attn_factor, dt, EMU).to(tl.float32)
    sin = cast(tl.sin(r) * attn_factor, dt, EMU).to(tl.float32)

    hq = tl.arange(0, H_PAD)
    q = _norm_rope_heads(q_ptr, t * sqt + hq * sqh, hq < H, qw_ptr, cos, sin, d, eps, D, R_HALF, dt, EMU)
    if K_FMT == 2:  # int4 keys are stored rotated: q in the same basis, from its rounded values
        q = _hadamard(cast(q, dt, EMU).to(tl.float32), H_PAD, D, LOG_D) * (1.0 / D)
    tl.store(qo_ptr + (t * H + hq)[:, None] * D + d[None, :], cast(q, dt, EMU), mask=(hq < H)[:, None])

    hk = tl.arange(0, HKV_PAD)
    kmask = (hk < HKV)[:, None]
    k = _norm_rope_heads(k_ptr, t * skt + hk * skh, hk < HKV, kw_ptr, cos, sin, d, eps, D, R_HALF, dt, EMU)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    page, off = slot // PAGE, slot % PAGE
    # k is rounded to the model dtype first (the reference casts or quantizes bf16 k)
    k_out = cast(k, dt, EMU).to(tl.float32)
    if K_FMT == 2:
        k_out = _hadamard(k_out, HKV_PAD, D, LOG_D)
    hok = hk < HKV
    k_row, ks_row = page * skp + off * sks + hk * skc, page * ksp + off * kst + hk * ksh
    _store_kv(kc_ptr, k_row, k_out, hok, ks_ptr, ks_row, HKV_PAD, D, K_FMT)
    v = tl.load(v_ptr + t * svt + hk[:, None] * svh + d[None, :], mask=kmask, other=0.0).to(tl.float32)
    v_row, vs_row = page * svp + off * svs + hk * svc, page * vsp + off * vst + hk * vsh
    _store_kv(vc_ptr, v_row, v, hok, vs_ptr, vs_row, HKV_PAD, D, V_FMT)


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def qk_norm_rope_write(
    q: torch.Tensor,  # [T, H, D], may be a strided view
    k: torch.Tensor,  # [T, Hkv, D]
    v: torch.Tensor,  # [T, Hkv, D]
    q_norm_w: torch.Tensor,
    k_norm_w: torch.Tensor,
    eps: float,
    positions: torch.Tensor,  # [T], or [3, T] (t, h, w) for a batch with image tokens (freq_axes then given)
    inv_freq: torch.Tensor,  # [R/2] fp32
    k_cache: torch.Tensor,  # [P, page, Hkv, D] token rows in the cache's format (int8: quantized here)
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [T]
    attn_factor: float = 1.0,  # YaRN's cos/sin scale
    freq_axes: torch.Tensor | None = None,  # [R/2]: the position stream of each frequency (multi-axis)
) -> torch.Tensor:
    t, n_heads, d = q.shape
    n_kv = k.shape[1]
    assert d & (d - 1) == 0, "head_dim must be a power of two"
    assert 0 < 2 * inv_freq.numel() <= d and k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    q_out = torch.empty((t, n_heads, d), dtype=q.dtype, device=q.device)
    if t == 0:
        return q_out
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    emu = interpreted(_qk_norm_rope_write_kernel)
    multi = positions.dim() == 2
    if multi:
        assert freq_axes is not None and positions.shape[0] == 3, "multi-axis positions need the frequencies' axes"
        axes = freq_axes.to(device=q.device, dtype=torch.int32).contiguous()
        positions = positions.contiguous()
    else:
        axes = positions  # unused
    ks, ksp, kst, ksh, k_fmt = cache_args(k_cache)
    vs, vsp, vst, vsh, v_fmt = cache_args(v_cache)
    _qk_norm_rope_write_kernel[(t,)](
        q, k, v, q_out, q_norm_w.contiguous(), k_norm_w.contiguous(), positions, inv_freq.contiguous(),
        k_cache, v_cache, slot_mapping,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        eps, float(attn_factor), ks, ksp, kst, ksh, vs, vsp, vst, vsh, axes, positions.stride(0),
        H=n_heads, HKV=n_kv, H_PAD=triton.next_power_of_2(n_heads), HKV_PAD=triton.next_power_of_2(n_kv),
        D=d, R_HALF=inv_freq.numel(), PAGE=k_cache.shape[1], EMU=emu, K_FMT=k_fmt, V_FMT=v_fmt, MULTI_AXIS=multi,
        LOG_D=d.bit_length() - 1, num_warps=8 if n_heads * d >= 4096 else 4,
        enable_fp_fusion=False,  # no fma contraction: products and sums rounded as the reference's torch ops
        **pdl_kwargs(q, t),
    )  # fmt: skip
    return q_out
