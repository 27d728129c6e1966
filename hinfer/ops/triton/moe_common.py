"""Helpers shared by the MoE kernels: output allocation (tests poison it), programmatic dependent launch."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every MoE output and scratch buffer comes from here (tests patch it to poison with NaN / junk)."""
    return torch.empty(shape, dtype=dtype, device=device)


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
