"""Triton twins of hinfer.ops.norm: RMSNorm, fused residual-add + RMSNorm, gated RMSNorm.

One kernel serves all three (MODE is a constexpr, so each variant compiles to its own straight-line code).
Rows are addressed as a 3-D view [A, B, N] with the last dim contiguous, so strided views (e.g. the `z` slice
of a fused projection viewed as [T, HV, V]) are read in place without a copy. Each program normalises
BLOCK_M rows of BLOCK_N (>= N) columns: one row for the hidden size, many rows for 128/256-wide heads.
All arithmetic is fp32; intermediate roundings to the model dtype mirror the reference bodies exactly.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start

_PLAIN, _ADD, _GATED = 0, 1, 2


@triton.jit
def _norm_kernel(
    x_ptr, r_ptr, z_ptr, w_ptr, y_ptr, r_out_ptr,
    n_rows, n_inner, n_cols,
    sx0, sx1, sr0, sr1, sz0, sz1,
    eps,
    MODE: tl.constexpr, EMU: tl.constexpr, ROUND_WY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PDL: tl.constexpr = False, SLOTS: tl.constexpr = 1, sxs=0,
):  # fmt: skip
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    a, b = rows // n_inner, rows % n_inner
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    dt = y_ptr.dtype.element_ty
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)  # a weight: read before the wait
    pdl_start(PDL)
    x_rows = x_ptr + (a * sx0 + b * sx1)[:, None] + cols[None, :]
    x = tl.load(x_rows, mask=mask, other=0.0).to(tl.float32)
    if SLOTS > 1:  # x is a row's SLOTS addends (a MoE's experts): summed in fp32 in slot order, rounded once
        for s in tl.static_range(1, SLOTS):
            x += tl.load(x_rows + s * sxs, mask=mask, other=0.0).to(tl.float32)
        x = cast(x, x_ptr.dtype.element_ty, EMU).to(tl.float32)
    if MODE == 1:
        res = tl.load(r_ptr + (a * sr0 + b * sr1)[:, None] + cols[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
        # the reference adds in the model dtype, stores that, and normalises the rounded sum
        s = cast(x + res, r_out_ptr.dtype.element_ty, EMU)
        tl.store(r_out_ptr + rows[:, None] * n_cols + cols[None, :], s, mask=mask)
        x = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    if MODE == 2:
        # reference: y = (x * rstd).to(dtype); y = weight * y (rounded); out = y * silu(z) in fp32
        y = cast(x * rstd[:, None], dt, EMU).to(tl.float32)
        y = w[None, :] * y
        if ROUND_WY:  # weight * y is rounded when its promoted dtype is the model dtype
            y = cast(y, dt, EMU).to(tl.float32)
        z = tl.load(z_ptr + (a * sz0 + b * sz1)[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = y * (z / (1.0 + tl.exp(-z)))
    else:
        y = x * rstd[:, None] * (1.0 + w[None, :])
    tl.store(y_ptr + rows[:, None] * n_cols + cols[None, :], cast(y, dt, EMU), mask=mask)


def _as_3d(x: torch.Tensor) -> torch.Tensor:
    """[A, B, N] view of x with a contiguous last dim (a copy only when no such view exists)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if x.dim() == 1:
        return x.view(1, 1, -1)
    if x.dim() == 2:
        return x.unsqueeze(1)
    if x.dim() > 3:
        x = x.reshape(-1, x.shape[-2], x.shape[-1])
    return x


def _launch(
    mode: int,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out_dtype: torch.dtype,
    residual: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    n, slots = x.shape[-1], None
    if mode == _ADD and x.dim() == residual.dim() + 1:  # [..., S, N]: S addends a row
        slots, x = x, x.select(-2, 0)
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    r_out = torch.empty(x.shape, dtype=out_dtype, device=x.device) if mode == _ADD else None
    x3 = _as_3d(x)
    rows, inner = x3.shape[0] * x3.shape[1], x3.shape[1]
    if rows == 0:
        return y, r_out
    for other in (residual, z):
        assert other is None or other.shape == x.shape, "operands must have x's shape"
    r3 = _as_3d(residual) if residual is not None else x3
    z3 = _as_3d(z) if z is not None else x3
    round_wy = torch.promote_types(weight.dtype, x.dtype) == x.dtype
    block_n = triton.next_power_of_2(n)
    block_m = max(1, min(64, 4096 // block_n))
    # one row of the hidden size per program is latency-bound at decode: more warps keep more loads in flight
    warps = 4 if block_m * block_n <= 4096 else (16 if block_n >= 8192 else 8)
    emu = interpreted(_norm_kernel)
    _norm_kernel[(triton.cdiv(rows, block_m),)](
        x3, r3, z3, weight, y, r_out if r_out is not None else y,
        rows, inner, n,
        x3.stride(0), x3.stride(1), r3.stride(0), r3.stride(1), z3.stride(0), z3.stride(1),
        eps,
        MODE=mode, EMU=emu, ROUND_WY=round_wy, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps,
        **pdl_kwargs(x, x3.shape[0]), **_slot_args(slots),
    )  # fmt: skip
    return y, r_out


def _slot_args(slots: torch.Tensor | None) -> dict:
    if slots is None or slots.shape[-2] == 1:
        return {}
    if slots.stride(-1) != 1:
        raise ValueError("add_rms_norm: the addends' rows need a contiguous last dim")
    return {"SLOTS": slots.shape[-2], "sxs": slots.stride(-2)}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(_PLAIN, x, weight, eps, x.dtype)[0]


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x); the sum is rounded to the promoted dtype as in the reference. x
    [..., S, N] against a residual [..., N]: x is each row's S addends, summed in fp32 first (hinfer.ops.norm)."""
    dtype = torch.promote_types(x.dtype, residual.dtype)
    y, r = _launch(_ADD, x, weight, eps, dtype, residual=residual)
    assert r is not None
    return y, r


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(_GATED, x, weight, eps, x.dtype, z=z)[0]
