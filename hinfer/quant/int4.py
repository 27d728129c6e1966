"""INT4 weights (W4A16), one scale (and optionally one zero point) per row and group of 128 along K.

Layout:
- qweight int32 [N, K/8]: word c of a row holds elements 8c..8c+7 as unsigned nibbles u, element 8c + e at bits
  4*POS[e], POS = (0, 4, 1, 5, 2, 6, 3, 7) (even elements in the low half-word, odd in the high one: one lop3
  then yields a ready bf16 pair). compressed-tensors `pack-quantized` stores element 8c + e at bits 4e; the
  two differ by this fixed permutation inside each word (`from_compressed_tensors` repacks).
- scales [N, ceil(K/128)] in the model dtype (bf16 on GPU).
- zeros uint8 [N, ceil(K/128)] (asymmetric) or None (symmetric, zero point 8).
Value: w = (u - zero) * scale. Symmetric: q = u - 8 in [-8, 7], scale = amax / 8 (the lowest error of the
simple symmetric rules; the largest positive value clips to 7/8 amax). Asymmetric (default): the group range
[min(w, 0), max(w, 0)] maps onto [0, 15] with an integer zero point, so 0 stays exact.

Paths of `matmul` (all with the fp32-accumulation reference body `matmul_ref`):
- CPU, fp32 models, or HINFER_TRITON=0: matmul_ref.
- M <= 64 (decode, MTP verify): the skinny Triton kernel reads packed words + scales once (tensor cores).
- M > 64 (prefill), HINFER_INT4_PREFILL = dequant (default): dequantize into a bf16 scratch and cuBLAS;
  fp8: dequantize into an e4m3 scratch with one scale per row (fp8_row_scale), activations to e4m3 per token,
  cuBLAS fp8 rowwise (`torch._scaled_mm`, as --quant fp8 prefills; reference body: matmul_ref_fp8): the weight
  rounds a second time, to e4m3's 4 significant bits, for fp8 tensor cores' twice the FLOPs of bf16;
  w4a16: Triton GEMM dequantizing tile by tile; w4a8: activations to fp8 per token and 128-group, int4 -> fp8
  exactly (u - z), fp8 tensor cores (reference body: matmul_ref_w4a8): on fragment order cuBLAS with 1x128
  scales on both operands where the installed one computes them (hinfer.quant.fp8.scaled_mm_group_scales_ok,
  probed), else and on this row layout the Triton GEMM converting in the tile.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from hinfer.ops.dispatch import use_triton
from hinfer.quant.fp8 import dequantize_act_fp8_ref, quantize_act_fp8_ref, scaled_mm_rowwise
from hinfer.quant.fp8_block import FP8_MAX

if TYPE_CHECKING:
    from hinfer.ops.triton.act_int8 import XInt8

GROUP = 128
_SCALE_FLOOR = 1e-8  # an all-zero group gets a tiny finite scale; its values still dequantize to exactly 0
PREFILL_MODES = ("dequant", "fp8", "w4a16", "w4a8")


POS = (0, 4, 1, 5, 2, 6, 3, 7)  # nibble position of element e of a word
# little-endian bytes 0..3 of a word hold nibble positions (0,1), (2,3), (4,5), (6,7): elements
_LO, _HI = [0, 4, 1, 5], [2, 6, 3, 7]  # low / high nibble of byte b holds element _LO[b] / _HI[b]


def pack_int4(u: torch.Tensor) -> torch.Tensor:
    """u [N, K] integers in [0, 15], K % 8 == 0 -> int32 [N, K/8], element 8c + e at bits 4*POS[e] of word c."""
    n, k = u.shape
    if k % 8:
        raise ValueError(f"int4 packing needs K % 8 == 0, got K={k}")
    u = u.to(torch.uint8).view(n, k // 8, 8)
    b = (u[..., _LO] | (u[..., _HI] << 4)).contiguous()  # [N, K/8, 4] bytes of each word
    return b.view(torch.int32).view(n, k // 8)


def unpack_int4(words: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """int32 [N, K/8] -> uint8 [N, K] nibbles (inverse of pack_int4)."""
    n, kw = words.shape
    b = words.contiguous().view(torch.uint8).view(n, kw, 4)
    u = torch.empty(n, kw, 8, dtype=torch.uint8, device=words.device)
    u[..., _LO], u[..., _HI] = b & 0xF, b >> 4
    u = u.view(n, kw * 8)
    return u if k is None else u[:, :k]


def _unpack_natural(words: torch.Tensor) -> torch.Tensor:
    """compressed-tensors order (element 8c + e at bits 4e) -> uint8 [N, 8 * words]."""
    n, kw = words.shape
    b = words.contiguous().view(torch.uint8).view(n, kw * 4)
    return torch.stack([b & 0xF, b >> 4], dim=-1).view(n, kw * 8)


def _groups(w: torch.Tensor, group: int) -> torch.Tensor:
    n, k = w.shape
    g = math.ceil(k / group)
    x = torch.zeros(n, g * group, dtype=torch.float32, device=w.device)
    x[:, :k] = w.float()  # zero padding changes neither amax nor the clamped min/max
    return x.view(n, g, group)


def _quantize_rows(w: torch.Tensor, group: int, zero_point: bool, scale_dtype: torch.dtype):
    n, k = w.shape
    x = _groups(w, group)
    if zero_point:
        hi, lo = x.amax(-1).clamp(min=0), x.amin(-1).clamp(max=0)
        s = ((hi - lo) / 15).clamp(min=_SCALE_FLOOR).to(scale_dtype).float()
        z = (-lo / s).round().clamp(0, 15)
        u = ((x / s[..., None]).round() + z[..., None]).clamp(0, 15)
    else:
        s = (x.abs().amax(-1) / 8).clamp(min=_SCALE_FLOOR).to(scale_dtype).float()
        z = None
        u = (x / s[..., None]).round().clamp(-8, 7) + 8
    u = u.view(n, -1)[:, :k].to(torch.uint8)
    return pack_int4(u), s.to(scale_dtype), None if z is None else z.to(torch.uint8)


@torch.no_grad()
def quantize_int4(
    w: torch.Tensor, group: int = GROUP, zero_point: bool = True, scale_dtype: torch.dtype | None = None
) -> Int4Weight:
    """Round-to-nearest int4 of w [N, K] (K % 8 == 0), processed in row chunks to bound the fp32 temporaries."""
    if w.dim() != 2:
        raise ValueError(f"quantize_int4 takes a [N, K] weight, got {tuple(w.shape)}")
    scale_dtype = scale_dtype or (w.dtype if w.is_floating_point() else torch.bfloat16)
    chunk = max(1, (1 << 26) // max(1, w.shape[1]))  # ~256 MB of fp32 per chunk
    parts = [_quantize_rows(w[i : i + chunk], group, zero_point, scale_dtype) for i in range(0, w.shape[0], chunk)]
    q = torch.cat([p[0] for p in parts])
    s = torch.cat([p[1] for p in parts])
    z = torch.cat([p[2] for p in parts]) if zero_point else None
    return Int4Weight(q, s, z, w.shape[1], group)


class Int4Weight(nn.Module):
    """A quantized [N, K] weight; `linear(x, w)` calls `w.matmul(x)`. Buffers move with `.to()`/state_dict."""

    def __init__(
        self,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        in_features: int,
        group: int = GROUP,
    ):
        super().__init__()
        n = qweight.shape[0]
        g = math.ceil(in_features / group)
        if qweight.dtype != torch.int32 or tuple(qweight.shape) != (n, in_features // 8) or in_features % 8:
            raise ValueError(f"qweight must be int32 [N, K/8], got {qweight.dtype} {tuple(qweight.shape)}")
        if tuple(scales.shape) != (n, g) or (zeros is not None and tuple(zeros.shape) != (n, g)):
            raise ValueError(f"scales/zeros must be [N, {g}]")
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.in_features, self.group = in_features, group

    @property
    def shape(self) -> tuple[int, int]:
        return (self.qweight.shape[0], self.in_features)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def extra_repr(self) -> str:
        kind = "asym" if self.zeros is not None else "sym"
        return f"{self.shape[0]}x{self.in_features}, int4 g{self.group} {kind}, scales {self.scales.dtype}"

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.zeros) if t is not None)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(u - zero) * scale computed in fp32, rounded once to `dtype` (default: the scale dtype)."""
        n, k = self.shape
        u = unpack_int4(self.qweight, k).float().view(n, -1)
        g = self.scales.shape[1]
        pad = g * self.group - k
        u = F.pad(u, (0, pad)).view(n, g, self.group)
        zero = 8.0 if self.zeros is None else self.zeros.float()[..., None]
        w = ((u - zero) * self.scales.float()[..., None]).view(n, -1)[:, :k]
        return w.to(dtype or self.dtype)

    def matmul_ref(self, x: torch.Tensor) -> torch.Tensor:
        """The semantics: fp32 products and accumulation of x and the dequantized weight, rounded to x.dtype."""
        return (x.float() @ self.dequantize(torch.float32).t()).to(x.dtype)

    def matmul_ref_w4a8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the w4a8 prefill path: x quantized to fp8 per token and 128-group first."""
        from hinfer.quant.fp8 import dequantize_act_fp8_ref, quantize_act_fp8_ref

        xd = dequantize_act_fp8_ref(*quantize_act_fp8_ref(x.reshape(-1, x.shape[-1]), GROUP), GROUP)
        return (xd @ self.dequantize(torch.float32).t()).to(x.dtype).view(*x.shape[:-1], -1)

    def matmul_ref_a8(self, x: torch.Tensor) -> torch.Tensor:
        """x quantized to int8 per token and 128-group (quantize_act_int8_ref), then the int4 matmul: what an
        int4 x int8 tensor-core decode computes (exact integer products and group sums, then the scales)."""
        xd = dequantize_act_int8_ref(*quantize_act_int8_ref(x.reshape(-1, x.shape[-1]), GROUP), GROUP)
        return (xd @ self.dequantize(torch.float32).t()).to(x.dtype).view(*x.shape[:-1], -1)

    def matmul_ref_fp8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the fp8 prefill path: the weight rounded to e4m3 per row (fp8_row_scale), x per token."""
        return matmul_ref_fp8(x, self.dequantize(torch.float32), fp8_row_scale(self.scales, self.zeros))

    def matmul(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if not (use_triton(x) and x.dtype == torch.bfloat16 and self.group == GROUP):
            y = self.matmul_ref(x)
            return y if out is None else out.copy_(y.reshape(out.shape))
        lead, n = x.shape[:-1], self.shape[0]
        return _triton_matmul(self, x.reshape(-1, self.in_features), out).view(*lead, n)

    @classmethod
    def from_compressed_tensors(
        cls,
        weight_packed: torch.Tensor,
        weight_scale: torch.Tensor,
        weight_shape: tuple[int, int] | torch.Tensor,
        weight_zero_point: torch.Tensor | None = None,
        group: int = GROUP,
    ) -> Int4Weight:
        """A compressed-tensors `pack-quantized` int4 group-`group` tensor (no g_idx / activation reordering).
        Same +8 offset as ours, natural nibble order (repacked here); its zero points are signed int4 + 8
        packed along N ([ceil(N/8), G] int32), which is exactly our unsigned zero."""
        n, k = (int(v) for v in weight_shape)
        zeros = None
        if weight_zero_point is not None:
            zeros = _unpack_natural(weight_zero_point.t()).t()[:n].contiguous()  # packed along dim 0
        qweight = pack_int4(_unpack_natural(weight_packed.to(torch.int32))[:, :k])
        return cls(qweight, weight_scale, zeros, k, group)


INT8_MAX = 127.0


def quantize_act_int8_ref(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K % group == 0) -> (q int8 [M, K], scales fp32 [M, K / group]): symmetric per token and group,
    scale = amax / 127 (a zero group keeps scale 1), q = x * (127 / amax) rounded to nearest even (a multiply by
    the group's reciprocal, as the int4 x int8 kernel quantizes: one IEEE division a group, not an element)."""
    m, k = x.shape
    xf = x.float().view(m, k // group, group)
    amax = xf.abs().amax(-1)
    pos = amax > 0
    safe, full = torch.where(pos, amax, 1.0), torch.full_like(amax, INT8_MAX)
    # tensor / tensor: IEEE divisions as the kernels' div.rn (torch divides by a scalar via its reciprocal)
    s = torch.where(pos, safe / full, 1.0)
    r = torch.where(pos, full / safe, 1.0)
    q = torch.round(xf * r[..., None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8).view(m, k)
    return q, s


def quantize_x_int8_ref(x: torch.Tensor) -> XInt8:
    """quantize_act_int8_ref's values packed as hinfer.ops.triton.act_int8 packs them (XInt8: words with byte b
    of word w at K offset 4 w + (0, 2, 1, 3)[b], scales, scale * sum q per group): that kernel's reference."""
    from hinfer.ops.triton.act_int8 import XInt8

    m, k = x.shape
    q, s = quantize_act_int8_ref(x, GROUP)
    words = q.view(m, k // 4, 4)[..., [0, 2, 1, 3]].contiguous().view(torch.int32).view(m, k // 4)
    sums = q.to(torch.float32).view(m, k // GROUP, GROUP).sum(-1) * s
    return XInt8(words, s, sums)


def dequantize_act_int8_ref(q: torch.Tensor, s: torch.Tensor, group: int) -> torch.Tensor:
    """fp32 [M, K] values of quantize_act_int8_ref's output."""
    m, k = q.shape
    return (q.float().view(m, k // group, group) * s[..., None]).view(m, k)


def fp8_row_scale(scales: torch.Tensor, zeros: torch.Tensor | None) -> torch.Tensor:
    """fp32 [N] scale of each row's e4m3 copy from scales / zeros [N, G]: the largest |(u - zero) * scale| the
    row can hold (u in [0, 15]; symmetric zero 8) over 448, so every value fits without clipping."""
    reach = 8.0 if zeros is None else torch.maximum(zeros.float(), 15.0 - zeros.float())
    return (scales.float() * reach).amax(1).clamp(min=_SCALE_FLOOR) / FP8_MAX


def weight_to_fp8_rows(w: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:
    """fp32 [N, K] dequantized weight -> e4m3 [N, K] of w / row_scale, rounded once (as the GPU scratch)."""
    return (w / row_scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def matmul_ref_fp8(x: torch.Tensor, w: torch.Tensor, row_scale: torch.Tensor) -> torch.Tensor:
    """The fp8 prefill semantics on a dequantized fp32 weight [N, K]: x to e4m3 per token, the weight to e4m3 per
    row, fp32 products and accumulation, rounded to x.dtype."""
    xd = dequantize_act_fp8_ref(*quantize_act_fp8_ref(x.reshape(-1, x.shape[-1]), None), None)
    wd = weight_to_fp8_rows(w, row_scale).float() * row_scale[:, None]
    return (xd @ wd.t()).to(x.dtype).view(*x.shape[:-1], -1)


def prefill_mode() -> str:
    mode = os.environ.get("HINFER_INT4_PREFILL", "dequant")
    if mode not in PREFILL_MODES:
        raise ValueError(f"HINFER_INT4_PREFILL={mode!r}; expected one of {', '.join(PREFILL_MODES)}")
    return mode


def _triton_matmul(w: Int4Weight, x: torch.Tensor, out: torch.Tensor | None, mode: str | None = None):
    from hinfer.ops.triton import linear as tlin
    from hinfer.ops.triton import linear_gemm as tg
    from hinfer.ops.triton.tiles.forms import INT4
    from hinfer.ops.triton.tiles.linear import SKINNY_MAX_M

    n = w.shape[0]
    if x.shape[0] <= SKINNY_MAX_M[INT4]:
        return tlin.skinny_matmul(x, INT4, w.qweight, n, w.scales, w.zeros, out=out)
    mode = mode or prefill_mode()
    if mode == "dequant":
        y = F.linear(x, tg.int4_dequantize(w.qweight, w.scales, w.zeros, w.in_features, x.dtype))
    elif mode == "fp8":  # the row layout's scratch passes through fp32 (the fragment layout's kernel writes e4m3)
        rs = fp8_row_scale(w.scales, w.zeros)
        wd = tg.int4_dequantize(w.qweight, w.scales, w.zeros, w.in_features, torch.float32)
        y = scaled_mm_rowwise(x, weight_to_fp8_rows(wd, rs), rs)
    elif mode == "w4a16":
        y = tg.gemm(x, None, INT4, w.qweight, w.scales, n, w.zeros, out_dtype=x.dtype)
    else:
        q, s = tg.quantize_act_fp8(x, GROUP)
        y = tg.gemm(q, s, INT4, w.qweight, w.scales, n, w.zeros, out_dtype=x.dtype)
    return y if out is None else out.copy_(y)
