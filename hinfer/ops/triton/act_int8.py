"""x rounded to int8 per row and 128-group, laid out as the int4 x int8 decode kernel's B fragments read it.

The same arithmetic as hinfer.quant.int4.quantize_act_int8_ref (scale amax / 127, a zero group scale 1, q =
round(x * (127 / amax)) to nearest even; its packed reference: hinfer.quant.int4.quantize_x_int8_ref), written
once per x so that every program of the matmul reads it instead of quantizing its own share (linear_int4_a8:
`xq`). Layout, per row: words [K / 4] int32 where byte b of word w holds K offset 4 w + (0, 2, 1, 3)[b] (the int8
MMA's column order for the fragment-ordered weights, so a thread's B registers are 8 contiguous words); scales
[K / 128] fp32 and scale * sum q [K / 128] fp32.

With `silu_mul`, x is the MLP's activation silu(gate) * up, computed here from the gate_up projection's rows
[gate | up] with the SiLU-mul kernel's roundings (activation.py): the down projection's x is then quantized in
the launch that would otherwise only apply the activation. With `norm`, x is rms_norm(x + residual) with the
add + RMSNorm kernel's roundings (norm.py; each program sums its row's squares itself), and the new residual is
written too: the projection after a norm (the MLP's gate_up) quantizes its x in the norm's launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import GROUP, cast, interpreted, pdl_kwargs, pdl_start

_RNE = tl.constexpr(12582912.0)  # 1.5 * 2^23: (v + _RNE) - _RNE rounds |v| < 2^22 to nearest even in fp32


@dataclass
class XInt8:
    """x [M, K] in int8 as linear_int4_a8 reads it: words [M, K / 4] int32 (bytes in MMA column order), scales
    [M, K / 128] fp32 (amax / 127) and sums [M, K / 128] fp32 (scale * sum of the group's int8 values)."""

    words: torch.Tensor
    scales: torch.Tensor
    sums: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return self.words.shape[0], self.words.shape[1] * 4


@triton.jit
def _quantize_kernel(x_ptr, w_ptr, s_ptr, q_ptr, K, stride_xm, G_BLOCK: tl.constexpr, PDL: tl.constexpr,
                     ACT: tl.constexpr = False, r_ptr=None, nw_ptr=None, r_out_ptr=None, stride_rm=0, eps=0.0,
                     NORM: tl.constexpr = False, K_P: tl.constexpr = 1, EMU: tl.constexpr = False):  # fmt: skip
    """One row's G_BLOCK groups per program: [G_BLOCK, 32 words, 4 bytes] in registers (ACT: x = silu(gate) * up
    from a [gate | up] row of 2 K; NORM: x = rms_norm(x + r) with weight nw, the row's K_P >= K values summed by
    every program, and the first program of a row storing x + r to r_out)."""
    m = tl.program_id(0).to(tl.int64)
    g0 = tl.program_id(1) * G_BLOCK
    gi = g0 + tl.arange(0, G_BLOCK)
    wi = tl.arange(0, 32)
    j = tl.arange(0, 4)
    ok = (gi < K // 128)[:, None, None]
    offs = gi[:, None, None] * 128 + wi[None, :, None] * 4 + j[None, None, :]
    if NORM:  # a weight: read before the wait
        nw = tl.load(nw_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    pdl_start(PDL)
    v = tl.load(x_ptr + m * stride_xm + offs, mask=ok, other=0.0).to(tl.float32)
    if NORM:  # the add + RMSNorm kernel's arithmetic: the sum rounded to the residual's dtype, then normed
        rd = r_out_ptr.dtype.element_ty
        kk = tl.arange(0, K_P)
        km = kk < K
        row = tl.load(x_ptr + m * stride_xm + kk, mask=km, other=0.0).to(tl.float32)
        row = cast(row + tl.load(r_ptr + m * stride_rm + kk, mask=km, other=0.0).to(tl.float32), rd, EMU)
        if tl.program_id(1) == 0:
            tl.store(r_out_ptr + m * K + kk, row, mask=km)
        row = row.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(row * row, axis=0) / K + eps)
        r = tl.load(r_ptr + m * stride_rm + offs, mask=ok, other=0.0).to(tl.float32)
        v = cast(v + r, rd, EMU).to(tl.float32)
        v = cast(v * rstd * (1.0 + nw), x_ptr.dtype.element_ty, EMU).to(tl.float32)
    if ACT:  # silu(gate) rounded to bf16, times up, rounded again: activation.silu_mul's arithmetic
        u = tl.load(x_ptr + m * stride_xm + K + offs, mask=ok, other=0.0)
        v = (v / (1.0 + tl.exp(-v))).to(u.dtype).to(tl.float32)
        v = (v * u.to(tl.float32)).to(u.dtype).to(tl.float32)
    amax = tl.max(tl.max(tl.abs(v), axis=2), axis=1)  # [G_BLOCK]
    pos = amax > 0.0
    safe = tl.where(pos, amax, 1.0)
    s = tl.where(pos, tl.math.div_rn(safe, 127.0), 1.0)
    r = tl.where(pos, tl.math.div_rn(tl.full(safe.shape, 127.0, tl.float32), safe), 1.0)
    t = v * r[:, None, None]
    q = ((t + _RNE) - _RNE).to(tl.int32)
    b = (j % 2) * 2 + j // 2  # the byte of K offset j: (0, 2, 1, 3)[j]
    words = tl.sum((q & 255) << (b * 8)[None, None, :], axis=2)  # [G_BLOCK, 32]
    gmask = gi < K // 128
    tl.store(w_ptr + m * (K // 4) + gi[:, None] * 32 + wi[None, :], words, mask=gmask[:, None])
    tl.store(s_ptr + m * (K // 128) + gi, s, mask=gmask)
    tl.store(q_ptr + m * (K // 128) + gi, tl.sum(tl.sum(q, axis=2), axis=1).to(tl.float32) * s, mask=gmask)


@dataclass
class NormIn:
    """An add + RMSNorm in front of the quantization: x is rms_norm(x + residual, weight, eps), and the new
    residual x + residual is written to `residual_out` ([M, K], contiguous, the residual's dtype)."""

    residual: torch.Tensor
    weight: torch.Tensor
    eps: float
    residual_out: torch.Tensor


def quantize_x_int8(x: torch.Tensor, silu_mul: bool = False, norm: NormIn | None = None) -> XInt8:
    """x bf16 [M, K] (K % 128 == 0) -> XInt8; with `silu_mul`, x is [M, 2 K] = [gate | up] and what is quantized
    is silu(gate) * up [M, K]; with `norm`, what is quantized is rms_norm(x + norm.residual) (add_rms_norm's
    first output; its second is written to norm.residual_out)."""
    m, k = x.shape
    k //= 2 if silu_mul else 1
    if k % GROUP or (silu_mul and x.shape[1] != 2 * k) or (silu_mul and norm is not None):
        raise ValueError(f"quantize_x_int8: K % {GROUP} == 0, got {tuple(x.shape)}{' as [gate | up]' * silu_mul}"
                         f"{' with a norm' * (norm is not None)}")  # fmt: skip
    if x.stride(-1) != 1:
        x = x.contiguous()
    r = norm.residual if norm is not None else x
    if norm is not None and (r.shape != x.shape or r.stride(-1) != 1 or norm.weight.shape != (k,)
                             or norm.residual_out.shape != x.shape or not norm.residual_out.is_contiguous()):  # fmt: skip
        raise ValueError(f"quantize_x_int8: a norm's residual {tuple(r.shape)}, weight {tuple(norm.weight.shape)} "
                         f"and residual_out for x {tuple(x.shape)}")  # fmt: skip
    out = XInt8(torch.empty(m, k // 4, dtype=torch.int32, device=x.device),
                torch.empty(m, k // GROUP, dtype=torch.float32, device=x.device),
                torch.empty(m, k // GROUP, dtype=torch.float32, device=x.device))  # fmt: skip
    g_block = 4
    _quantize_kernel[(m, triton.cdiv(k // GROUP, g_block))](
        x, out.words, out.scales, out.sums, k, x.stride(0), G_BLOCK=g_block, ACT=silu_mul, num_warps=4,
        r_ptr=r, nw_ptr=norm.weight if norm is not None else x, r_out_ptr=norm.residual_out if norm is not None else x,
        stride_rm=r.stride(0), eps=norm.eps if norm is not None else 0.0, NORM=norm is not None,
        K_P=triton.next_power_of_2(k) if norm is not None else 1, EMU=interpreted(_quantize_kernel),
        **pdl_kwargs(x, m),
        enable_fp_fusion=False,  # x * r rounded before the round-to-integer add, as the reference's torch ops
    )
    return out
