"""Helpers shared by the MoE kernels: output allocation (tests poison it), rounding casts, interpreter check."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def interpreted(kernel: object) -> bool:
    """True when `kernel` runs in Triton's CPU interpreter (TRITON_INTERPRET=1 when it was defined)."""
    return not isinstance(kernel, triton.runtime.jit.JITFunction)


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every MoE output and scratch buffer comes from here (tests patch it to poison with NaN / junk)."""
    return torch.empty(shape, dtype=dtype, device=device)


@triton.jit
def cast(x, dt: tl.constexpr, EMU: tl.constexpr):
    """fp32 x -> dt, round to nearest even. The interpreter truncates fp32 -> bf16, so under EMU the bits are
    rounded first (GPU builds pass EMU=False and get the hardware conversion)."""
    if EMU:
        if dt == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            x = u.to(tl.float32, bitcast=True)
    return x.to(dt)


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """Programmatic dependent launch (Hopper): wait for the previous kernel's results, then allow the next kernel
    to launch, so its launch and prologue overlap this kernel. The trigger fires once every program of this
    kernel has started, so the successor never starves it; decode sizes only (larger grids would share SMs
    with waiting successors for longer)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


def pdl_kwargs(x: torch.Tensor) -> dict:
    """Launch options + constexpr for PDL: opt-in with HINFER_MOE_PDL=1 (CUDA only, measured by bench/moe_kernels.py
    --pdl before it becomes the default)."""
    on = x.is_cuda and os.environ.get("HINFER_MOE_PDL", "0") == "1"
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}
