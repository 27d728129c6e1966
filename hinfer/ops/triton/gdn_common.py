"""Helpers shared by the Gated DeltaNet Triton kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def l2norm(x, AXIS: tl.constexpr):
    """fp32 x * rsqrt(sum(x^2) + 1e-6) along AXIS (the last one), as hinfer.ops.gdn.l2norm."""
    return x * tl.rsqrt(tl.sum(x * x, axis=AXIS, keep_dims=True) + 1e-6)
