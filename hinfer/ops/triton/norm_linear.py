"""Triton twin of hinfer.ops.norm.add_rms_norm_linear: residual add + RMSNorm and a small linear of the normed rows
(a MoE layer's router) in one launch, for decode rows.

A program owns one token row and BLOCK_E rows of the linear's weight: it loads that weight tile before it waits for
the previous kernel (programmatic dependent launch: the router's bytes arrive while the attention block finishes),
then redoes the row's add + norm (a few KB, the same bits in every program) and dots the tile with it. The first
program of each row stores the normed row and the new residual. Roundings mirror the reference: the sum in the
model dtype, the norm's output rounded before the dot, the dot's fp32 sum rounded to the output dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start


@triton.jit
def _add_norm_linear_kernel(
    x_ptr, r_ptr, nw_ptr, lw_ptr, y_ptr, r_out_ptr, out_ptr,
    n_cols, n_out, sx, sr, eps,
    EMU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_E: tl.constexpr, PDL: tl.constexpr = False,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    pe = tl.program_id(1)
    cols = tl.arange(0, BLOCK_N)
    cm = cols < n_cols
    rows = pe * BLOCK_E + tl.arange(0, BLOCK_E)
    rm = rows < n_out
    dt = y_ptr.dtype.element_ty
    # weights first: nothing a previous kernel writes
    nw = tl.load(nw_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    lw = tl.load(lw_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :], mask=rm[:, None] & cm[None, :],
                 other=0.0).to(tl.float32)  # fmt: skip
    pdl_start(PDL)
    x = tl.load(x_ptr + t * sx + cols, mask=cm, other=0.0).to(tl.float32)
    res = tl.load(r_ptr + t * sr + cols, mask=cm, other=0.0).to(tl.float32)
    s = cast(x + res, r_out_ptr.dtype.element_ty, EMU).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
    y = cast(s * rstd * (1.0 + nw), dt, EMU)
    if pe == 0:
        tl.store(r_out_ptr + t * n_cols + cols, s.to(r_out_ptr.dtype.element_ty), mask=cm)
        tl.store(y_ptr + t * n_cols + cols, y, mask=cm)
    acc = tl.sum(lw * y.to(tl.float32)[None, :], axis=1)
    tl.store(out_ptr + t * n_out + rows, cast(acc, out_ptr.dtype.element_ty, EMU), mask=rm)


def add_rms_norm_linear(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, lin_weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x, rms_norm(...) @ lin_weight.T) for 2-D x [T, H] and residual (rows
    with a contiguous last dim), lin_weight [E, H] contiguous in x's dtype."""
    t, n = x.shape
    e = lin_weight.shape[0]
    assert residual.shape == x.shape and lin_weight.shape[1] == n and lin_weight.is_contiguous()
    assert x.stride(-1) == 1 and residual.stride(-1) == 1
    dtype = torch.promote_types(x.dtype, residual.dtype)
    y = torch.empty((t, n), dtype=dtype, device=x.device)
    r_out = torch.empty((t, n), dtype=dtype, device=x.device)
    out = torch.empty((t, e), dtype=dtype, device=x.device)
    if t == 0:
        return y, r_out, out
    block_n = triton.next_power_of_2(n)
    block_e = max(1, min(triton.next_power_of_2(e), 8192 // block_n))  # ~32 fp32 weights per thread at 8 warps
    _add_norm_linear_kernel[(t, triton.cdiv(e, block_e))](
        x, residual, weight, lin_weight, y, r_out, out,
        n, e, x.stride(0), residual.stride(0), eps,
        EMU=interpreted(_add_norm_linear_kernel), BLOCK_N=block_n, BLOCK_E=block_e, num_warps=8,
        **pdl_kwargs(x, t),
    )  # fmt: skip
    return y, r_out, out
