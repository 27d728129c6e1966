"""Quantized MoE routed experts: one fused expert projection ([E, N, K]: experts_gate_up [E, 2I, H] or
experts_down [E, H, I]) as one weight object that `hinfer.ops.moe.moe_experts` takes in place of the tensor.

int4 only (`Int4ExpertsWeight`). Per expert exactly hinfer.quant.int4's layout (nibble order POS, groups of 128
consecutive inputs of a row, scales in the model dtype, optional uint8 zero points), stacked on a leading expert
dim - what the grouped expert kernels (hinfer/ops/triton/moe_gemm.py, FMT 1) read:
- qweight int32 [E, N, K/8], scales [E, N, ceil(K/128)], zeros uint8 [E, N, ceil(K/128)] or None (symmetric).
Groups run along rows, so quantizing the [E*N, K] stack at once is exactly quantizing each expert alone
(hinfer.ops.triton.moe_int4.quantize_experts_int4, which the kernel tests use; a test checks they agree).

fp8 experts are not provided: the grouped expert kernels have no fp8 format (moe_gemm.py's FMT 2 is only
sketched), so an fp8 expert weight would run the reference body only; the fp8 recipes keep the experts in the
model dtype.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hinfer.quant.int4 import GROUP, Int4Weight, quantize_int4


class Int4ExpertsWeight(nn.Module):
    """The int4 experts of one fused projection; buffers, so `.to()` and `state_dict()` carry them.

    `shape` is the logical [E, N, K]; `expert(e)` is expert e as an `Int4Weight` (views, no copy), which the
    reference body dequantizes one expert at a time."""

    def __init__(
        self,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        in_features: int,
        group: int = GROUP,
    ):
        super().__init__()
        e, n = qweight.shape[:2]
        g = math.ceil(in_features / group)
        if qweight.dtype != torch.int32 or tuple(qweight.shape) != (e, n, in_features // 8) or in_features % 8:
            raise ValueError(f"qweight must be int32 [E, N, K/8], got {qweight.dtype} {tuple(qweight.shape)}")
        if tuple(scales.shape) != (e, n, g) or (zeros is not None and tuple(zeros.shape) != (e, n, g)):
            raise ValueError(f"scales/zeros must be [E, N, {g}] = {[e, n, g]}")
        if zeros is not None and zeros.dtype != torch.uint8:
            raise ValueError(f"zeros must be uint8, got {zeros.dtype}")
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.in_features, self.group = in_features, group

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.qweight.shape[0], self.qweight.shape[1], self.in_features)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def extra_repr(self) -> str:
        e, n, k = self.shape
        kind = "asym" if self.zeros is not None else "sym"
        return f"{e} experts x {n}x{k}, int4 g{self.group} {kind}, scales {self.scales.dtype}"

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.zeros) if t is not None)

    def expert(self, e: int) -> Int4Weight:
        """Expert e's [N, K] weight (views of this object's buffers)."""
        z = None if self.zeros is None else self.zeros[e]
        return Int4Weight(self.qweight[e], self.scales[e], z, self.in_features, self.group)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """All experts [E, N, K] (tests and tools; the reference body dequantizes one expert at a time)."""
        e, n, k = self.shape
        z = None if self.zeros is None else self.zeros.reshape(e * n, -1)
        flat = Int4Weight(self.qweight.reshape(e * n, -1), self.scales.reshape(e * n, -1), z, k, self.group)
        return flat.dequantize(dtype).view(e, n, k)


@torch.no_grad()
def quantize_experts_int4(
    w: torch.Tensor, group: int = GROUP, zero_point: bool = True, scale_dtype: torch.dtype | None = None
) -> Int4ExpertsWeight:
    """Round-to-nearest int4 of every expert of w [E, N, K] (K % 8 == 0): hinfer.quant.int4.quantize_int4 on the
    [E*N, K] stack (row-wise groups: identical to expert by expert; its row chunks bound the fp32 temporaries)."""
    if w.dim() != 3:
        raise ValueError(f"quantize_experts_int4 takes an [E, N, K] weight, got {tuple(w.shape)}")
    e, n, k = w.shape
    q = quantize_int4(w.reshape(e * n, k), group, zero_point, scale_dtype)
    zeros = None if q.zeros is None else q.zeros.view(e, n, -1)
    return Int4ExpertsWeight(q.qweight.view(e, n, -1), q.scales.view(e, n, -1), zeros, k, group)


def quantize_experts(w: torch.Tensor, recipe) -> Int4ExpertsWeight:
    """The routed experts w [E, N, K] in `recipe`'s format (a hinfer.quant.recipes.QuantRecipe; int4 only)."""
    if recipe.fmt != "int4":
        raise NotImplementedError(
            f"recipe {recipe.name}: routed experts can only be quantized to int4 (the grouped expert kernels "
            f"have no {recipe.fmt} format); drop the 'experts' target"
        )
    return quantize_experts_int4(w, recipe.int4_group, recipe.int4_zero_point)
