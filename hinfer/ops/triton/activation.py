"""SwiGLU on a fused [gate | up] row in one pass (torch needs a strided silu, then a mul: two launches)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_mul_kernel(x_ptr, y_ptr, inter, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0)
    # torch: silu(g) rounded to the input dtype, then * u rounded again; the product of two rounded values is
    # formed in fp32 (exact for bf16 inputs) before the final rounding
    s = (g / (1.0 + tl.exp(-g))).to(u.dtype).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (s * u.to(tl.float32)).to(u.dtype), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    x = gate_up.reshape(-1, gate_up.shape[-1])
    if x.stride(-1) != 1:
        x = x.contiguous()
    inter = x.shape[-1] // 2
    y = torch.empty((x.shape[0], inter), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        block = 1024
        _silu_mul_kernel[(x.shape[0], triton.cdiv(inter, block))](x, y, inter, x.stride(0), y.stride(0), BLOCK=block)
    return y.reshape(*gate_up.shape[:-1], inter)
