"""Helpers shared by the Gated DeltaNet Triton kernels."""

from __future__ import annotations

import triton
import triton.language as tl


def interpreted(kernel: object) -> bool:
    """True when `kernel` runs in Triton's CPU interpreter (TRITON_INTERPRET=1 when it was decorated)."""
    return not isinstance(kernel, triton.runtime.jit.JITFunction)


@triton.jit
def round_to(x, dt: tl.constexpr, EMU: tl.constexpr):
    """fp32 x rounded to dt (round to nearest even) and back to fp32. The interpreter truncates fp32 -> bf16,
    so under EMU the bits are rounded by hand; GPU builds (EMU=False) use the hardware conversion."""
    if EMU:
        if dt == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            x = u.to(tl.float32, bitcast=True)
    return x.to(dt).to(tl.float32)


@triton.jit
def l2norm(x, AXIS: tl.constexpr):
    """fp32 x * rsqrt(sum(x^2) + 1e-6) along AXIS (the last one), as hinfer.ops.gdn.l2norm."""
    return x * tl.rsqrt(tl.sum(x * x, axis=AXIS, keep_dims=True) + 1e-6)
