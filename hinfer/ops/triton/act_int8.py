"""x rounded to int8 per row and 128-group, laid out as the int4 x int8 decode kernel's B fragments read it.

The same arithmetic as hinfer.quant.int4.quantize_act_int8_ref (scale amax / 127, a zero group scale 1, q =
round(x * (127 / amax)) to nearest even; its packed reference: hinfer.quant.int4.quantize_x_int8_ref), written
once per x so that every program of the matmul reads it instead of quantizing its own share (linear_int4_a8:
`xq`). Layout, per row: words [K / 4] int32 where byte b of word w holds K offset 4 w + (0, 2, 1, 3)[b] (the int8
MMA's column order for the fragment-ordered weights, so a thread's B registers are 8 contiguous words); scales
[K / 128] fp32 and scale * sum q [K / 128] fp32.

With `silu_mul`, x is the MLP's activation silu(gate) * up, computed here from the gate_up projection's rows
[gate | up] with the SiLU-mul kernel's roundings (activation.py): the down projection's x is then quantized in
the launch that would otherwise only apply the activation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import GROUP, pdl_kwargs, pdl_start

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
                     ACT: tl.constexpr = False):  # fmt: skip
    """One row's G_BLOCK groups per program: [G_BLOCK, 32 words, 4 bytes] in registers (ACT: x = silu(gate) * up
    from a [gate | up] row of 2 K)."""
    m = tl.program_id(0).to(tl.int64)
    g0 = tl.program_id(1) * G_BLOCK
    gi = g0 + tl.arange(0, G_BLOCK)
    wi = tl.arange(0, 32)
    j = tl.arange(0, 4)
    ok = (gi < K // 128)[:, None, None]
    offs = gi[:, None, None] * 128 + wi[None, :, None] * 4 + j[None, None, :]
    pdl_start(PDL)
    v = tl.load(x_ptr + m * stride_xm + offs, mask=ok, other=0.0).to(tl.float32)
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


def quantize_x_int8(x: torch.Tensor, silu_mul: bool = False) -> XInt8:
    """x bf16 [M, K] (K % 128 == 0) -> XInt8; with `silu_mul`, x is [M, 2 K] = [gate | up] and what is quantized
    is silu(gate) * up [M, K]."""
    m, k = x.shape
    k //= 2 if silu_mul else 1
    if k % GROUP or (silu_mul and x.shape[1] != 2 * k):
        raise ValueError(f"quantize_x_int8: K % {GROUP} == 0, got {tuple(x.shape)}{' as [gate | up]' * silu_mul}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = XInt8(torch.empty(m, k // 4, dtype=torch.int32, device=x.device),
                torch.empty(m, k // GROUP, dtype=torch.float32, device=x.device),
                torch.empty(m, k // GROUP, dtype=torch.float32, device=x.device))  # fmt: skip
    g_block = 4
    _quantize_kernel[(m, triton.cdiv(k // GROUP, g_block))](
        x, out.words, out.scales, out.sums, k, x.stride(0), G_BLOCK=g_block, ACT=silu_mul, num_warps=4,
        **pdl_kwargs(x, m),
        enable_fp_fusion=False,  # x * r rounded before the round-to-integer add, as the reference's torch ops
    )
    return out
