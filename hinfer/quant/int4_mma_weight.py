"""The int4 weight in mma fragment order (hinfer.quant.int4_mma_layout), as a module: what CUDA decode reads.

`use_fragment_order` swaps every fitting Int4Weight of a model placed on a GPU for its twin here; `matmul` sends
decode rows to the tensor-core kernels (linear_int4_mma, linear_int4_a8, linear_int4_wgmma) and prefill rows to
the GEMMs HINFER_INT4_PREFILL names; `to_int4()` gives the row-packed weight back exactly.
"""

from __future__ import annotations

import logging
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from hinfer.ops.dispatch import int4_decode_a8, int4_wgmma_rows, use_triton
from hinfer.quant.fp8 import scaled_mm_rowwise
from hinfer.quant.int4 import (
    GROUP,
    Int4Weight,
    fp8_row_scale,
    matmul_ref_fp8,
    prefill_mode,
)
from hinfer.quant.int4_mma_layout import K_ALIGN, permute_words, unpermute_words

log = logging.getLogger("hinfer.quant")


class Int4MmaWeight(nn.Module):
    """An Int4Weight in fragment order, the form CUDA decode reads (`use_fragment_order` swaps it in when the
    model is placed on the GPU): words [N/16, 2K], scales [G, N], zeros [G, N] uint8 or None. Same values and
    `matmul` semantics as the Int4Weight it came from; `to_int4()` gives that weight back exactly."""

    group = GROUP

    def __init__(self, words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, n: int, k: int):
        super().__init__()
        self.register_buffer("words", words)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.n, self.k = n, k

    @classmethod
    def from_int4(cls, w: Int4Weight) -> Int4MmaWeight:
        if w.group != GROUP:
            raise ValueError(f"the mma layout takes group {GROUP}, got {w.group}")
        n, k = w.shape
        zeros = None if w.zeros is None else w.zeros.t().contiguous()
        return cls(permute_words(w.qweight, k), w.scales.t().contiguous(), zeros, n, k)

    def to_int4(self) -> Int4Weight:
        zeros = None if self.zeros is None else self.zeros.t().contiguous()
        if self.words.is_cuda and use_triton(self.words):  # one pass of the packed bytes (int4_mma_dequant.py)
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_rows

            qweight = int4_mma_rows(self.words, self.n, self.k)
        else:
            qweight = unpermute_words(self.words, self.k)
        return Int4Weight(qweight, self.scales.t().contiguous(), zeros, self.k)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def in_features(self) -> int:
        return self.k

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def extra_repr(self) -> str:
        kind = "asym" if self.zeros is not None else "sym"
        return f"{self.n}x{self.k}, int4 g{GROUP} {kind} fragment order, scales {self.scales.dtype}"

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.words, self.scales, self.zeros) if t is not None)

    def clone(self) -> Int4MmaWeight:
        z = None if self.zeros is None else self.zeros.clone()
        return Int4MmaWeight(self.words.clone(), self.scales.clone(), z, self.n, self.k)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(u - zero) * scale in fp32, rounded once to `dtype` (default: the scale dtype), as Int4Weight does."""
        dtype = dtype or self.dtype
        if self.words.is_cuda and use_triton(self.words) and dtype == torch.bfloat16:
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

            return int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k)
        return self.to_int4().dequantize(dtype)

    def matmul_ref(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.dequantize(torch.float32).t()).to(x.dtype)

    def fp8_row_scale(self) -> torch.Tensor:
        """hinfer.quant.int4.fp8_row_scale of this weight, kept while the scales are unchanged (prefill takes it
        per GEMM; its few small kernels would cost a few percent of a chunk's)."""
        key = (self.scales.data_ptr(), self.scales._version, None if self.zeros is None else self.zeros._version)
        if getattr(self, "_fp8_key", None) != key:
            zeros = None if self.zeros is None else self.zeros.t()
            self._fp8_scale, self._fp8_key = fp8_row_scale(self.scales.t(), zeros), key
        return self._fp8_scale

    def matmul_ref_fp8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the fp8 prefill path (hinfer.quant.int4.matmul_ref_fp8)."""
        return matmul_ref_fp8(x, self.dequantize(torch.float32), self.fp8_row_scale())

    def matmul(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Up to MAX_M rows: the tensor-core kernel on the fragments; more (prefill): as HINFER_INT4_PREFILL says
        (`prefill`)."""
        if not (use_triton(x) and x.dtype == torch.bfloat16):
            y = self.matmul_ref(x)
            return y if out is None else out.copy_(y.reshape(out.shape))
        from hinfer.ops.triton.linear_int4_mma import MAX_M, int4_mma_matmul

        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.k)
        if x2.shape[0] <= MAX_M:
            if self._a8_takes(x2):
                from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

                return int4_a8_matmul(x2, self, out=out).view(*lead, self.n)
            if self._wgmma_takes(x2.shape[0]):
                from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul

                return int4_wgmma_matmul(x2, self, out=out).view(*lead, self.n)
            return int4_mma_matmul(x2, self, out=out).view(*lead, self.n)
        return self.prefill(x2, out, prefill_mode()).view(*lead, self.n)

    def prefill(self, x: torch.Tensor, out: torch.Tensor | None, mode: str) -> torch.Tensor:
        """x bf16 [M, K] on CUDA past the decode rows, through prefill mode `mode` (hinfer.quant.int4): dequant
        into a bf16 scratch and cuBLAS (a few percent of a chunk's GEMM); fp8 into an e4m3 scratch, cuBLAS fp8
        rowwise; w4a8 on cuBLAS fp8 with 1x128 scales where probed to work; otherwise (w4a16, w4a8) the row
        layout's GEMM on a transient row-packed copy (`to_int4`: one pass of the packed bytes)."""
        if mode == "fp8":
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

            rs = self.fp8_row_scale()
            y = scaled_mm_rowwise(x, int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k,
                                                         row_scale=rs), rs)  # fmt: skip
        elif mode == "dequant":
            y = F.linear(x, self.dequantize(x.dtype))
        elif mode == "w4a8" and self._group_scaled_mm_ok(x):
            y = self._w4a8_cublas(x)
        else:
            return self.to_int4().matmul(x, out=out)
        return y if out is None else out.copy_(y)

    def _group_scaled_mm_ok(self, x: torch.Tensor) -> bool:
        from hinfer.quant.fp8 import scaled_mm_group_scales_ok

        return x.is_cuda and self.n % 16 == 0 and scaled_mm_group_scales_ok(x.device.index or 0)

    def _w4a8_cublas(self, x: torch.Tensor) -> torch.Tensor:
        """W4A8 (matmul_ref_w4a8's semantics) on cuBLAS fp8: the weight as u - z in e4m3 (exact), x per token and
        128-group, both operands' 1x128 scales applied to each group's partial product."""
        from hinfer.ops.triton import linear_gemm as tg
        from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

        w8 = int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k, unscaled=True)
        q, s = tg.quantize_act_fp8(x, GROUP)
        return torch._scaled_mm(q, w8.t(), scale_a=s.t().contiguous().t(), scale_b=self.scales.float().t(),
                                out_dtype=x.dtype)  # fmt: skip

    def matmul_ref_w4a8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the w4a8 prefill path (Int4Weight.matmul_ref_w4a8)."""
        return self.to_int4().matmul_ref_w4a8(x)

    def _a8_takes(self, x: torch.Tensor) -> bool:
        """Whether these rows go through the int4 x int8 kernel (int4_decode_a8 says where)."""
        from hinfer.ops.triton.tiles.linear import a8_swept_faster

        mode = int4_decode_a8()
        if mode == "bf16" or (mode == "tuned" and not a8_swept_faster(x.shape[0], self.n, self.k)):
            return False
        from hinfer.ops.triton.linear_int4_a8 import a8_takes

        return a8_takes(x.shape[0], self.n, self.k, zero=self.zeros is not None)

    def _wgmma_takes(self, m: int) -> bool:
        """Whether the warpgroup-MMA kernel takes these m rows (int4_wgmma_rows says where)."""
        if self.scales.dtype != torch.bfloat16:
            return False
        rows = int4_wgmma_rows()
        if rows is None:
            from hinfer.ops.triton.tiles.linear import wgmma_swept_faster

            return wgmma_swept_faster(m, self.n, self.k)
        return 0 < rows <= m

    def silu_mul_matmul(self, gate_up: torch.Tensor) -> torch.Tensor | None:
        """self.matmul(silu_mul(gate_up)) for gate_up [..., 2 K] (the MLP's down projection) where the int4 x int8
        kernel takes these rows: the SiLU-mul is done where x is quantized (in each program's prologue, or in the
        launch that quantizes x ahead: the tile's x_ahead), one launch fewer, the same numbers. None elsewhere:
        the caller applies the activation and calls matmul (ops.linear.silu_mul_linear)."""
        g2 = gate_up.reshape(-1, gate_up.shape[-1])
        if gate_up.shape[-1] != 2 * self.k or not _decode_rows_on_cuda(g2) or not self._a8_takes(g2[:, : self.k]):
            return None
        from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

        return int4_a8_matmul(g2, self, silu_mul=True).view(*gate_up.shape[:-1], self.n)

    def norm_matmul(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
        """(self.matmul(rms_norm(x + residual)), x + residual) for rows [M, K] (the MLP's gate_up after its add +
        RMSNorm) where the int4 x int8 kernel takes these rows with x quantized ahead in its own launch (the tile's
        x_ahead: 2-8 rows on the 27B): the add and the norm are done in that launch, which replaces the norm's;
        the normed rows are not kept. The numbers are add_rms_norm's but for its row sum's order (rstd may differ
        in its last bit). None elsewhere: the caller runs add_rms_norm and matmul
        (ops.norm.add_rms_norm_into_linear)."""
        if (x.dim() != 2 or x.shape[-1] != self.k or residual.shape != x.shape or residual.dtype != x.dtype
                or weight.dtype != x.dtype or not _decode_rows_on_cuda(x) or not self._a8_takes(x)):  # fmt: skip
            return None
        from hinfer.ops.triton.act_int8 import NormIn
        from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
        from hinfer.ops.triton.tiles.linear import a8_config

        if not a8_config(x.shape[0], self.n, self.k).x_ahead:  # in each program's prologue it measured slower
            return None
        r_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        y = int4_a8_matmul(x, self, norm=NormIn(residual.contiguous(), weight, eps, r_out))
        return y, r_out

    def matmul_tail(self, x: torch.Tensor, tail: torch.Tensor, out: torch.Tensor) -> bool:
        """out [M, N + T] = [x @ self^T, x @ tail^T] in one launch (the tail rows on CUDA cores beside the int4
        tiles) when the tensor-core kernel takes x and the tail is bf16; False (nothing written) otherwise."""
        if tail.dtype != torch.bfloat16 or tail.stride(-1) != 1 or not _decode_rows_on_cuda(x):
            return False
        if self._a8_takes(x):
            from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

            int4_a8_matmul(x, self, out=out, tail=tail)
            return True
        from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

        int4_mma_matmul(x, self, out=out, tail=tail)
        return True


def _decode_rows_on_cuda(x: torch.Tensor) -> bool:
    """Whether the tensor-core kernel takes these rows: bf16 on CUDA with Triton, 1 .. MAX_M of them."""
    if not (use_triton(x) and x.is_cuda and x.dtype == torch.bfloat16):
        return False
    from hinfer.ops.triton.linear_int4_mma import MAX_M

    return 0 < x.shape[0] <= MAX_M


def fragment_order_fits(w: nn.Module) -> bool:
    """An Int4Weight the fragment-order kernels take: group 128, bf16 scales, N % 64 and K % 128 == 0."""
    if not isinstance(w, Int4Weight):
        return False
    n, k = w.shape
    return (w.group == GROUP and w.scales.dtype == torch.bfloat16 and n % 64 == 0
            and k % K_ALIGN == 0)  # fmt: skip


def fragment_order_wanted() -> bool:
    """HINFER_INT4_LAYOUT=rows keeps the row-packed kernels (GEMV, skinny); the default `mma` decodes on tensor
    cores from fragment order and prefills as HINFER_INT4_PREFILL says (Int4MmaWeight.matmul)."""
    layout = os.environ.get("HINFER_INT4_LAYOUT", "mma")
    if layout not in ("mma", "rows"):
        raise ValueError(f"HINFER_INT4_LAYOUT={layout!r}; expected mma or rows")
    prefill_mode()  # a bad mode fails here, at load, not at the first prefill
    return layout == "mma"


def swap_to_fragment_order(model: nn.Module) -> int:
    """Swap every fitting Int4Weight below `model` for its fragment-ordered twin, in place and one at a time (the
    peak extra memory is one weight's temporaries), on any device. -> how many were swapped."""
    swapped = 0
    with torch.no_grad():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if fragment_order_fits(child):
                    setattr(parent, name, Int4MmaWeight.from_int4(child))
                    swapped += 1
    return swapped


def use_fragment_order(model: nn.Module) -> nn.Module:
    """The CUDA decode form of a model's int4 weights: swapped when the model sits on a GPU that runs the Triton
    kernels and HINFER_INT4_LAYOUT / HINFER_INT4_PREFILL leave the default. `model` may itself be an Int4Weight
    (then its twin is returned). Idempotent."""
    first = next(model.buffers(), None)
    if first is None or not (first.is_cuda and use_triton(first)) or not fragment_order_wanted():
        return model
    if fragment_order_fits(model):
        return Int4MmaWeight.from_int4(model)
    t0 = time.monotonic()
    n = swap_to_fragment_order(model)
    if n:
        log.info("int4: %d weights re-laid out in mma fragment order for the CUDA kernels in %.1f s", n,
                 time.monotonic() - t0)  # fmt: skip
    return model
