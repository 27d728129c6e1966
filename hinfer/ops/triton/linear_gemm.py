"""Prefill-size linear kernels: fp8 activation quantization, int4 dequantization, and one tiled GEMM for
W4A16 (int4 dequantized in the tile, bf16 tensor cores), W4A8 (int4 -> fp8 exactly, fp8 tensor cores) and
W8A8 with 128x128 weight blocks (the official Qwen FP8 layout).

Scales that vary along K (weight groups/blocks, per-token-group activation scales) are applied to each
128-wide K-step's partial product before it joins the fp32 accumulator ("promotion", as in DeepSeek-V3's
fp8 GEMM); scales constant along K (per-token, per-channel) are applied once in the epilogue, and W4A16 folds
its scale into the dequantized bf16 tile so the tensor-core accumulation chains across K.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.linear_int4 import fast_int4_ok, int4_minus8
from hinfer.ops.triton.tiles.forms import GemmConfig
from hinfer.ops.triton.tiles.linear import QGROUP, gemm_config

FP8_MAX = 448.0
ACT_EPS = 1e-12  # amax floor: an all-zero row quantizes to zeros with a tiny finite scale
QG = tl.constexpr(QGROUP)
_FMT = {"fp8_row": 1, "fp8_block": 2, "int4": 3}


@triton.jit
def e4m3_rne(v):
    """v (fp32, |v| <= 448) rounded to the nearest e4m3 value, ties to even, still as fp32: the conversion that
    follows is then exact whichever way the hardware converts (sm_90 goes through fp16, and that double
    rounding moves ~0.2% of quotients lying on an e4m3 midpoint). Adding and subtracting 2^(e + 20), e the
    exponent of |v| (at least -6, the subnormal step), rounds at e4m3's 3 mantissa bits in fp32's own RNE."""
    a = tl.abs(v)
    e = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
    c = ((e + 20 + 127) << 23).to(tl.float32, bitcast=True)
    r = (a + c) - c
    sign = v.to(tl.int32, bitcast=True) & -2147483648  # the sign bit copied, so -tiny rounds to -0 as torch's does
    return (r.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _act_quant_kernel(
    x_ptr, q_ptr, s_ptr, K, stride_xm, stride_qm, stride_sm, stride_sg, GROUP, BLOCK: tl.constexpr
):  # fmt: skip
    m = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    k_lo = g * GROUP
    k_hi = tl.minimum(k_lo + GROUP, K)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK):
        rk = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + m * stride_xm + rk, mask=rk < k_hi, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.math.div_rn(tl.maximum(tl.max(amax, axis=0), 1e-12), 448.0)
    tl.store(s_ptr + m * stride_sm + g * stride_sg, scale)
    for k0 in range(k_lo, k_hi, BLOCK):
        rk = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + m * stride_xm + rk, mask=rk < k_hi, other=0.0).to(tl.float32)
        q = e4m3_rne(tl.clamp(tl.math.div_rn(x, scale), -448.0, 448.0))
        tl.store(q_ptr + m * stride_qm + rk, q.to(q_ptr.dtype.element_ty), mask=rk < k_hi)


def quantize_act_fp8(x: torch.Tensor, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic e4m3 quantization of x [M, K]: per token (group None -> scales [M, 1]) or per token and group
    of `group` columns (scales [M, ceil(K/group)]); scale = max(amax, 1e-12) / 448, q = x / scale."""
    m, k = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    g = k if group is None else group
    n_groups = triton.cdiv(k, g)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((m, n_groups), dtype=torch.float32, device=x.device)
    block = min(triton.next_power_of_2(g), 1024)
    _act_quant_kernel[(m, n_groups)](
        x, q, s, k, x.stride(0), q.stride(0), s.stride(0), s.stride(1), g, BLOCK=block, num_warps=4
    )
    return q, s


@triton.jit
def _int4_dequant_kernel(
    w_ptr, s_ptr, z_ptr, out_ptr, N, K, stride_wn, stride_sn,
    HAS_ZERO: tl.constexpr, FAST_INT4: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k0 = tl.program_id(1) * BLOCK_K
    rk = k0 + tl.arange(0, BLOCK_K)
    rw = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    n_ok = rn < N
    words = tl.load(
        w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rw[None, :],
        mask=n_ok[:, None] & (rw < K // 8)[None, :],
        other=0,
    )
    w = int4_minus8(words, BLOCK_N, BLOCK_K, FAST_INT4).to(tl.float32)
    s = tl.load(s_ptr + rn * stride_sn + k0 // QG, mask=n_ok, other=0.0).to(tl.float32)
    if HAS_ZERO:
        w += 8.0 - tl.load(z_ptr + rn * stride_sn + k0 // QG, mask=n_ok, other=8).to(tl.float32)[:, None]
    out = (w * s[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(
        out_ptr + rn.to(tl.int64)[:, None] * K + rk[None, :], out, mask=n_ok[:, None] & (rk < K)[None, :]
    )


def int4_dequantize(
    qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, k: int, dtype: torch.dtype
) -> torch.Tensor:
    """[N, K] dense weight of an int4 weight (the scratch of the dequantize + cuBLAS prefill path)."""
    n = qweight.shape[0]
    out = torch.empty((n, k), dtype=dtype, device=qweight.device)
    fast = zeros is None and qweight.is_cuda and fast_int4_ok(qweight.device.index or 0)
    grid = (triton.cdiv(n, 64), triton.cdiv(k, QGROUP))
    _int4_dequant_kernel[grid](
        qweight,
        scales,
        zeros if zeros is not None else scales,
        out,
        n,
        k,
        qweight.stride(0),
        scales.stride(0),
        HAS_ZERO=zeros is not None,
        FAST_INT4=fast,
        BLOCK_N=64,
        BLOCK_K=QGROUP,
        num_warps=4,
    )
    return out


@triton.jit
def _gemm_kernel(
    a_ptr, as_ptr, w_ptr, ws_ptr, wz_ptr, c_ptr,
    M, N, K,
    stride_am, stride_asm, stride_asg, stride_wn, stride_wsn, stride_cm,
    FMT: tl.constexpr, A_MODE: tl.constexpr, HAS_ZERO: tl.constexpr, FAST_INT4: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """FMT 1 fp8 per-channel, 2 fp8 128x128 blocks, 3 int4 group 128; A_MODE 0 bf16 activations, 1 fp8 per
    token (scales [M]), 2 fp8 per token and 128-group (scales [M, K/128])."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n  # grouped order: GROUP_M row-tiles share each W column-tile while it is in L2
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    a_rows = a_ptr + rm.to(tl.int64)[:, None] * stride_am
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn
    if FMT == 2:
        ws_rows = ws_ptr + (rn // 128) * stride_wsn
    else:
        ws_rows = ws_ptr + rn * stride_wsn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        a = tl.load(a_rows + rk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if FMT == 3:
            rw = k0 // 8 + tl.arange(0, BLOCK_K // 8)
            words = tl.load(w_rows + rw[None, :], mask=n_ok[:, None] & (rw < K // 8)[None, :], other=0)
            w = int4_minus8(words, BLOCK_N, BLOCK_K, FAST_INT4)
            sw = tl.load(ws_rows + k0 // QG, mask=n_ok, other=0.0).to(tl.float32)
            if HAS_ZERO:
                zc = 8.0 - tl.load(wz_ptr + rn * stride_wsn + k0 // QG, mask=n_ok, other=8).to(tl.float32)
            if A_MODE == 0:
                wf = w.to(tl.float32)
                if HAS_ZERO:
                    wf += zc[:, None]
                acc = tl.dot(a, tl.trans((wf * sw[:, None]).to(tl.bfloat16)), acc)
            else:
                if HAS_ZERO:
                    wq = (w.to(tl.float32) + zc[:, None]).to(tl.float8e4nv)  # |u - z| <= 15: exact in e4m3
                else:
                    wq = w.to(tl.float8e4nv)
                part = tl.dot(a, tl.trans(wq))
                col = sw
        else:
            w = tl.load(w_rows + rk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            if FMT == 2:
                part = tl.dot(a, tl.trans(w))
                col = tl.load(ws_rows + k0 // QG, mask=n_ok, other=0.0).to(tl.float32)
            else:
                acc = tl.dot(a, tl.trans(w), acc)
        if FMT == 2 or (FMT == 3 and A_MODE != 0):
            if A_MODE == 2:
                row = tl.load(as_ptr + rm * stride_asm + (k0 // QG) * stride_asg, mask=m_ok, other=0.0)
                acc += part * row[:, None] * col[None, :]
            else:
                acc += part * col[None, :]
    if A_MODE == 1:
        acc = acc * tl.load(as_ptr + rm * stride_asm, mask=m_ok, other=0.0)[:, None]
    if FMT == 1:
        acc = acc * tl.load(ws_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    c = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    fmt: str,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    n: int,
    w_zero: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    cfg: GemmConfig | None = None,
) -> torch.Tensor:
    """c [M, n] = a [M, K] @ W^T. a bf16 (a_scale None; int4 only), or fp8 with a_scale [M, 1] (per token)
    or [M, ceil(K/128)] (per token-group; required by nothing, allowed for every format)."""
    m, k = a.shape
    if a.stride(-1) != 1:
        a = a.contiguous()
    if a_scale is None:
        if fmt != "int4":
            raise ValueError("bf16 activations are for int4 weights (W4A16); quantize them for fp8 weights")
        a_mode = 0
    else:
        a_mode = 1 if a_scale.shape[1] == 1 else 2
        if a_mode == 2 and a_scale.shape[1] != triton.cdiv(k, QGROUP):
            raise ValueError(f"activation scales {tuple(a_scale.shape)} are neither per token nor per 128")
    if fmt == "fp8_row" and a_mode != 1:
        raise ValueError("fp8 per-channel weights take per-token activation scales")
    promote = fmt == "fp8_block" or (fmt == "int4" and a_mode != 0) or a_mode == 2
    cfg = cfg or gemm_config(m, n, k, promote)
    if QGROUP % cfg.block_k:
        raise ValueError(f"block_k must divide {QGROUP}")
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    fast = fmt == "int4" and w_zero is None and a.is_cuda and fast_int4_ok(a.device.index or 0)
    s_a = a_scale if a_scale is not None else w_scale
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    _gemm_kernel[grid](
        a, s_a, w, w_scale, w_zero if w_zero is not None else w_scale, c,
        m, n, k,
        a.stride(0), s_a.stride(0), s_a.stride(1) if s_a.dim() > 1 else 0, w.stride(0),
        w_scale.stride(0) if w_scale.dim() > 1 else 1, c.stride(0),
        FMT=_FMT[fmt], A_MODE=a_mode, HAS_ZERO=w_zero is not None, FAST_INT4=fast,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return c
