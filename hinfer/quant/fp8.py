"""FP8 (e4m3) weights: W8A16 at decode sizes, W8A8 with dynamic activation scales at prefill sizes.

Two scale layouts:
- "channel" (our `--quant fp8` conversion): scale fp32 [N], W[n, :] ~= weight[n, :] * scale[n], scale = amax/448.
- "block" (the official Qwen FP8 checkpoints): `weight_scale_inv` fp32 [ceil(N/128), ceil(K/128)], multiplied
  to dequantize (hinfer.quant.fp8_block has the quantizer and dequantizer of that layout).

Paths of `matmul` (reference bodies: `matmul_ref` = W8A16, `matmul_ref_w8a8` = the prefill semantics):
- CPU / fp32 / HINFER_TRITON=0: matmul_ref.
- M <= 64: the skinny Triton kernel reads the fp8 weight once and converts it to bf16 in registers;
  activations stay bf16 (W8A16): at decode the weight bytes are the cost, activation quantization buys nothing.
- M > 64: activations quantized on the fly (Triton), then
  channel: per-token scales, `torch._scaled_mm` rowwise (cuBLAS fp8, per-token x per-channel);
  block:   per-token-and-128-group scales, the Triton block-scaled GEMM (or, HINFER_FP8_BLOCK_PREFILL=scaled_mm,
           `torch._scaled_mm` with 1x128 / 128x128 block scaling where the installed cuBLAS supports it).
"""

from __future__ import annotations

import functools
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from hinfer.ops.dispatch import use_triton
from hinfer.quant.fp8_block import FP8_DTYPE, FP8_MAX, dequantize_fp8_block, quantize_fp8_block

BLOCK = (128, 128)
ACT_GROUP = 128
_EPS = 1e-12  # activation amax floor (matches hinfer.ops.triton.linear_gemm)
_W_FLOOR = 1e-12  # weight amax floor: an all-zero row keeps a finite scale


def quantize_act_fp8_ref(x: torch.Tensor, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q e4m3 [M, K], scales fp32 [M, G]); G = 1 (per token, group None) or ceil(K/group).
    scale = max(amax, 1e-12) / 448, q = clamp(x / scale, -448, 448) rounded to nearest even."""
    m, k = x.shape
    g = k if group is None else group
    n_groups = math.ceil(k / g)
    xf = F.pad(x.float(), (0, n_groups * g - k)).view(m, n_groups, g)
    amax = xf.abs().amax(-1).clamp(min=_EPS)
    s = amax / torch.full_like(amax, FP8_MAX)  # a tensor divisor: CUDA divides a tensor by a scalar via 1/448
    q = (xf / s[..., None]).clamp(-FP8_MAX, FP8_MAX).view(m, -1)[:, :k].to(FP8_DTYPE)
    return q, s


def dequantize_act_fp8_ref(q: torch.Tensor, s: torch.Tensor, group: int | None) -> torch.Tensor:
    """fp32 [M, K] values of quantize_act_fp8_ref's output."""
    m, k = q.shape
    g = k if group is None else group
    xf = F.pad(q.float(), (0, s.shape[1] * g - k)).view(m, -1, g) * s[..., None]
    return xf.view(m, -1)[:, :k]


class Fp8Weight(nn.Module):
    """A float8_e4m3fn [N, K] weight with per-channel or 128x128 block scales; `linear(x, w)` calls matmul."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None = None):
        super().__init__()
        if weight.dtype != FP8_DTYPE or weight.dim() != 2:
            raise ValueError(f"weight must be float8_e4m3fn [N, K], got {weight.dtype} {tuple(weight.shape)}")
        n, k = weight.shape
        want = (n,) if block is None else (math.ceil(n / block[0]), math.ceil(k / block[1]))
        if tuple(scale.shape) != want:
            raise ValueError(f"scale shape {tuple(scale.shape)} != {want} for weight {(n, k)} block {block}")
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale.float())
        self.block = None if block is None else tuple(block)

    @classmethod
    def from_block_scaled(
        cls, weight: torch.Tensor, weight_scale_inv: torch.Tensor, block: tuple[int, int] = BLOCK
    ) -> Fp8Weight:
        """The official checkpoint tensors as they are (`weight`, `weight_scale_inv`)."""
        return cls(weight, weight_scale_inv, block)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)  # type: ignore[return-value]

    def extra_repr(self) -> str:
        kind = "per-channel" if self.block is None else f"{self.block[0]}x{self.block[1]} blocks"
        return f"{self.shape[0]}x{self.shape[1]}, fp8 e4m3 {kind}"

    def nbytes(self) -> int:
        return self.weight.numel() + self.scale.numel() * 4

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        if self.block is None:
            return (self.weight.float() * self.scale[:, None]).to(dtype)
        return dequantize_fp8_block(self.weight, self.scale, self.block, dtype)

    def matmul_ref(self, x: torch.Tensor) -> torch.Tensor:
        """W8A16: fp32 products and accumulation of bf16 x and the dequantized weight."""
        return (x.float() @ self.dequantize(torch.float32).t()).to(x.dtype)

    def matmul_ref_w8a8(self, x: torch.Tensor) -> torch.Tensor:
        """W8A8 (prefill): x quantized per token (channel) or per token and 128-group (block) first."""
        x2 = x.reshape(-1, x.shape[-1])
        group = None if self.block is None else ACT_GROUP
        y = dequantize_act_fp8_ref(*quantize_act_fp8_ref(x2, group), group) @ self.dequantize(torch.float32).t()
        return y.to(x.dtype).view(*x.shape[:-1], -1)

    def matmul_ref_w8a8_decode(self, x: torch.Tensor) -> torch.Tensor:
        """W8A8 at decode sizes (`HINFER_FP8_DECODE=w8a8`): x quantized per token and 128-group whatever the
        weight's scheme, then fp32 products and accumulation."""
        x2 = x.reshape(-1, x.shape[-1])
        xd = dequantize_act_fp8_ref(*quantize_act_fp8_ref(x2, ACT_GROUP), ACT_GROUP)
        return (xd @ self.dequantize(torch.float32).t()).to(x.dtype).view(*x.shape[:-1], -1)

    def matmul(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if not (use_triton(x) and x.dtype == torch.bfloat16 and self.block in (None, BLOCK)):
            y = self.matmul_ref(x)
            return y if out is None else out.copy_(y.reshape(out.shape))
        lead, n = x.shape[:-1], self.shape[0]
        return _triton_matmul(self, x.reshape(-1, self.shape[1]), out).view(*lead, n)

    def matmul_tail(self, x: torch.Tensor, tail: torch.Tensor, out: torch.Tensor) -> bool:
        """out [M, N + T] = [x @ self^T, x @ tail^T] in one launch (the tail rows on CUDA cores beside the tensor-core
        tiles: hinfer.quant.apply.RowSplitWeight's bf16 rows) where the fp8 tensor-core kernel takes x; False
        (nothing written) otherwise."""
        if (x.dim() != 2 or x.dtype != torch.bfloat16 or tail.dtype != torch.bfloat16 or tail.stride(-1) != 1
                or self.block not in (None, BLOCK) or not use_triton(x) or not _mma_takes(self, x)):  # fmt: skip
            return False
        from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul

        fp8_mma_matmul(x, self.weight, self.scale, self.block is not None, out=out, tail=tail)
        return True


@torch.no_grad()
def quantize_fp8(w: torch.Tensor, scheme: str = "channel") -> Fp8Weight:
    """w [N, K] -> Fp8Weight: scheme "channel" (scale = row amax / 448) or "block" (128x128, official layout)."""
    if scheme == "block":
        q, s = quantize_fp8_block(w, BLOCK)
        return Fp8Weight(q, s, BLOCK)
    if scheme != "channel":
        raise ValueError(f"unknown fp8 scale scheme {scheme!r} (channel | block)")
    chunk = max(1, (1 << 26) // max(1, w.shape[1]))
    qs, ss = [], []
    for i in range(0, w.shape[0], chunk):
        wf = w[i : i + chunk].float()
        s = wf.abs().amax(-1).clamp(min=_W_FLOOR) / FP8_MAX
        qs.append((wf / s[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE))
        ss.append(s)
    return Fp8Weight(torch.cat(qs), torch.cat(ss))


def block_prefill_mode() -> str:
    return os.environ.get("HINFER_FP8_BLOCK_PREFILL", "triton")


@functools.cache
def _scaled_mm_block_ok(device_index: int) -> bool:
    """Whether torch._scaled_mm takes 1x128 x 128x128 block scales here (cuBLAS >= 12.9 on sm90); probed once."""
    try:
        dev = torch.device("cuda", device_index)
        a = torch.randn(128, 256, device=dev).to(FP8_DTYPE)
        b = torch.randn(128, 256, device=dev).to(FP8_DTYPE)
        sa = torch.ones(2, 128, device=dev).t()  # [M, K/128], column-major
        sb = torch.ones(1, 2, device=dev).t()  # [K/128, N/128]
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return True
    except Exception:  # noqa: BLE001 - unsupported scaling mode in this build
        return False


@functools.cache
def scaled_mm_group_scales_ok(device_index: int) -> bool:
    """Whether torch._scaled_mm takes 1x128 scales on both operands here (per row of x and per row of the weight,
    each 128-group of K; cuBLAS >= 12.9 on sm90) and computes what they mean, at an odd row count: probed once on
    random values against the fp32 sum of scaled group products."""
    try:
        dev = torch.device("cuda", device_index)
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(65, 256, device=dev, generator=g).clamp(-8, 8).to(FP8_DTYPE)
        b = torch.randint(-8, 8, (128, 256), device=dev, generator=g).float().to(FP8_DTYPE)
        sa = torch.rand(65, 2, device=dev, generator=g) + 0.5
        sb = torch.rand(2, 128, device=dev, generator=g) + 0.5  # [G, N], as int4 fragment order keeps scales
        y = torch._scaled_mm(a, b.t(), scale_a=sa.t().contiguous().t(), scale_b=sb.t(), out_dtype=torch.float32)
        af, bf = a.float().view(65, 2, 128), b.float().view(128, 2, 128)
        ref = torch.einsum("mgk,ngk,mg,gn->mn", af, bf, sa, sb)
        return bool(((y - ref).norm() / ref.norm()) < 1e-3)
    except Exception:  # noqa: BLE001 - unsupported scaling in this build
        return False


def scaled_mm_rowwise(x: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x bf16 [M, K] @ (w8 e4m3 [N, K] * scale [N])^T on cuBLAS fp8 (`torch._scaled_mm` rowwise), x quantized to
    e4m3 per token on the fly: the prefill GEMM of per-channel fp8 weights, and of int4 ones with
    HINFER_INT4_PREFILL=fp8."""
    from hinfer.ops.triton import linear_gemm as tg

    q, s = tg.quantize_act_fp8(x, None)
    return torch._scaled_mm(q, w8.t(), scale_a=s, scale_b=scale.view(1, -1), out_dtype=x.dtype)


DECODE_MODES = ("w8a16", "w8a8")


def decode_mode() -> str:
    """fp8 weights at decode sizes with M >= 2: `w8a16` (default: bf16 activations, the exact W8A16 semantics)
    or `w8a8` (activations to e4m3 per token and 128-group inside the kernel, fp8 tensor cores)."""
    mode = os.environ.get("HINFER_FP8_DECODE", "w8a16")
    if mode not in DECODE_MODES:
        raise ValueError(f"HINFER_FP8_DECODE={mode!r}; expected one of {', '.join(DECODE_MODES)}")
    return mode


def _mma_takes(w: Fp8Weight, x: torch.Tensor) -> bool:
    """Whether these rows go through the fp8 tensor-core kernel (HINFER_FP8_MMA says where; CUDA only: its
    inline PTX has no interpreter)."""
    from hinfer.ops.dispatch import fp8_decode_mma

    mode = fp8_decode_mma()
    if not x.is_cuda or mode == "0" or not w.weight.is_contiguous() or w.weight.data_ptr() % 4:
        return False  # the kernel reads the weight's bytes as int32 words
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_fits
    from hinfer.ops.triton.tiles.linear import fp8_mma_config, fp8_mma_swept_faster

    m, (n, k) = x.shape[0], w.shape
    if mode == "tuned" and not fp8_mma_swept_faster(m, n, k):
        return False
    return fp8_mma_fits(fp8_mma_config(m, n, k), m, n, k) and (w.block is None or n % 128 == 0)


def _triton_matmul(
    w: Fp8Weight, x: torch.Tensor, out: torch.Tensor | None, block_mode: str | None = None
) -> torch.Tensor:
    from hinfer.ops.triton import linear as tlin
    from hinfer.ops.triton import linear_gemm as tg
    from hinfer.ops.triton.tiles.forms import FP8_BLOCK, FP8_ROW
    from hinfer.ops.triton.tiles.linear import SKINNY_MAX_M, skinny_config

    fmt = FP8_ROW if w.block is None else FP8_BLOCK
    n, k = w.shape
    if x.shape[0] <= SKINNY_MAX_M[fmt]:
        a8 = x.shape[0] > 1 and decode_mode() == "w8a8"
        if not a8 and _mma_takes(w, x):
            from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul

            return fp8_mma_matmul(x, w.weight, w.scale, w.block is not None, out=out)
        cfg = skinny_config(fmt, x.shape[0], n, k, a8=True) if a8 else None
        return tlin.skinny_matmul(x, fmt, w.weight, n, w.scale, out=out, cfg=cfg, a8=a8)
    if fmt == FP8_ROW:
        if x.is_cuda and n % 16 == 0 and k % 16 == 0:
            y = scaled_mm_rowwise(x, w.weight, w.scale)
        else:
            q, s = tg.quantize_act_fp8(x, None)
            y = tg.gemm(q, s, FP8_ROW, w.weight, w.scale, n, out_dtype=x.dtype)
    else:
        q, s = tg.quantize_act_fp8(x, ACT_GROUP)
        mode = block_mode or block_prefill_mode()
        if mode == "scaled_mm" and x.is_cuda and _scaled_mm_block_ok(x.device.index or 0):
            y = torch._scaled_mm(q, w.weight.t(), scale_a=s.t().contiguous().t(), scale_b=w.scale.t(),
                                 out_dtype=x.dtype)
        else:
            y = tg.gemm(q, s, FP8_BLOCK, w.weight, w.scale, n, out_dtype=x.dtype)
    return y if out is None else out.copy_(y)
