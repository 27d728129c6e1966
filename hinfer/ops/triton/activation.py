"""SwiGLU on a fused [gate | up] row in one pass (torch needs a strided silu, then a mul: two launches)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import pdl_kwargs, pdl_start


@triton.jit
def _silu_mul_kernel(x_ptr, y_ptr, inter, stride_x, stride_y, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    pdl_start(PDL)
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
        _silu_mul_kernel[(x.shape[0], triton.cdiv(inter, block))](x, y, inter, x.stride(0), y.stride(0), BLOCK=block,
                                                                 **pdl_kwargs(x, x.shape[0]))  # fmt: skip
    return y.reshape(*gate_up.shape[:-1], inter)


@triton.jit
def _sigmoid_gate_kernel(x_ptr, g_ptr, y_ptr, heads, dim, sx_t, sx_h, sg_t, sg_h, BLOCK: tl.constexpr,
                         PDL: tl.constexpr = False):  # fmt: skip
    pdl_start(PDL)
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < heads * dim
    h, d = offs // dim, offs % dim
    x = tl.load(x_ptr + t * sx_t + h * sx_h + d, mask=mask, other=0.0)
    g = tl.load(g_ptr + t * sg_t + h * sg_h + d, mask=mask, other=0.0).to(tl.float32)
    s = (1.0 / (1.0 + tl.exp(-g))).to(x.dtype).to(tl.float32)  # torch rounds sigmoid to the input dtype first
    tl.store(y_ptr + t * heads * dim + offs, (x.to(tl.float32) * s).to(x.dtype), mask=mask)


def sigmoid_gate(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(gate) for [T, H, D] tensors whose last dim is contiguous (gate: a view into q_proj's output)."""
    assert x.shape == gate.shape and x.dim() == 3 and x.stride(-1) == 1 and gate.stride(-1) == 1
    t, h, d = x.shape
    y = torch.empty((t, h, d), dtype=x.dtype, device=x.device)
    if t:
        block = 1024
        _sigmoid_gate_kernel[(t, triton.cdiv(h * d, block))](
            x, gate, y, h, d, x.stride(0), x.stride(1), gate.stride(0), gate.stride(1), BLOCK=block,
            **pdl_kwargs(x, t),
        )
    return y
