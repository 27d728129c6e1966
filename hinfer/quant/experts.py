"""Quantized MoE routed experts: one fused expert projection ([E, N, K]: experts_gate_up [E, 2I, H] or
experts_down [E, H, I]) as one weight object that `hinfer.ops.moe.moe_experts` takes in place of the tensor.

Per expert exactly the layout of the linear layers' format, stacked on a leading expert dim - what the grouped
expert kernels (hinfer/ops/triton/moe_gemm.py) read:
- `Int4ExpertsWeight` (int4 recipes, FMT 1): hinfer.quant.int4's layout (nibble order POS, groups of 128
  consecutive inputs of a row, scales in the model dtype, optional uint8 zero points): qweight int32
  [E, N, K/8], scales [E, N, ceil(K/128)], zeros uint8 [E, N, ceil(K/128)] or None (symmetric). Groups run
  along rows, so quantizing the [E*N, K] stack at once is exactly quantizing each expert alone.
- `Fp8ExpertsWeight` (fp8 recipes, FMT 2): hinfer.quant.fp8's layout: weight float8_e4m3fn [E, N, K] and fp32
  scales [E, N] (per channel, `fp8-default`) or [E, ceil(N/128), ceil(K/128)] (128x128 blocks, `fp8-block` and
  the official Qwen FP8 checkpoints); each expert's tensors are `quantize_fp8(w[e], scheme)`'s exactly.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hinfer.quant.fp8 import BLOCK, Fp8Weight, quantize_fp8
from hinfer.quant.fp8_block import FP8_DTYPE, dequantize_fp8_block, quantize_fp8_block
from hinfer.quant.int4 import GROUP, Int4Weight, quantize_int4


class Int4ExpertsWeight(nn.Module):
    """The int4 experts of one fused projection; buffers, so `.to()` and `state_dict()` carry them.

    `shape` is the logical [E, N, K]; `expert(e)` is expert e as an `Int4Weight` (views, no copy, unless the
    words are stored by stripes: `to_stripes`), which the reference body dequantizes one expert at a time."""

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
        self.words, self.paired = "rows", False  # to_stripes changes them

    @property
    def shape(self) -> tuple[int, int, int]:
        n = self.qweight.shape[1] * (16 if self.words == "stripes" else 1)
        return (self.qweight.shape[0], n, self.in_features)

    @torch.no_grad()
    def to_stripes(self, gate_up: bool) -> Int4ExpertsWeight:
        """Store the words stripe by stripe (hinfer.quant.int4_mma_layout.stripe_experts; `gate_up`: [gate | up]
        rows, paired 8 and 8 a stripe): a warp's 16 bytes a thread of the decode kernel become one 512-byte run,
        and the grouped kernels find every word by its row. In place, idempotent."""
        from hinfer.quant.int4_mma_layout import stripe_experts

        _, n, k = self.shape
        if self.words == "stripes" or self.group != GROUP or n % 16 or k % GROUP:
            return self
        self.qweight, self.words, self.paired = stripe_experts(self.qweight, k, gate_up), "stripes", gate_up
        return self

    def _rows(self, e0: int, e1: int) -> torch.Tensor:
        """Experts e0 .. e1 - 1's words in the row layout (a copy when stored as stripes)."""
        from hinfer.quant.int4_mma_layout import unstripe_experts

        q = self.qweight[e0:e1]
        return q if self.words == "rows" else unstripe_experts(q, self.in_features, self.paired)

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def extra_repr(self) -> str:
        e, n, k = self.shape
        kind = "asym" if self.zeros is not None else "sym"
        return (f"{e} experts x {n}x{k}, int4 g{self.group} {kind}, scales {self.scales.dtype}"
                f"{', words by stripes' if self.words == 'stripes' else ''}")  # fmt: skip

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scales, self.zeros) if t is not None)

    def kernel_experts(self):
        """The grouped kernels' view of these experts (hinfer.ops.triton.moe_int4.Int4Experts), or None for groups
        they do not take (the reference body runs those)."""
        if self.group != GROUP:
            return None
        from hinfer.ops.triton.moe_int4 import Int4Experts

        return Int4Experts(self.qweight, self.scales, self.zeros, self.in_features, self.words)

    def expert(self, e: int) -> Int4Weight:
        """Expert e's [N, K] weight (views of this object's buffers)."""
        z = None if self.zeros is None else self.zeros[e]
        return Int4Weight(self._rows(e, e + 1)[0], self.scales[e], z, self.in_features, self.group)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """All experts [E, N, K] (tests and tools; the reference body dequantizes one expert at a time)."""
        e, n, k = self.shape
        z = None if self.zeros is None else self.zeros.reshape(e * n, -1)
        flat = Int4Weight(self._rows(0, e).reshape(e * n, -1), self.scales.reshape(e * n, -1), z, k, self.group)
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


class Fp8ExpertsWeight(nn.Module):
    """The fp8 e4m3 experts of one fused projection; buffers, so `.to()` and `state_dict()` carry them.

    `weight` float8_e4m3fn [E, N, K]; `scale` fp32 [E, N] (per output channel, block None) or
    [E, ceil(N/128), ceil(K/128)] (block (128, 128)); w[e] = weight[e] * its row's / block's scale.
    `shape` is the logical [E, N, K], `dtype` the stored element type (float8_e4m3fn); `expert(e)` is expert e
    as an `Fp8Weight` (views, no copy), which the reference body dequantizes one expert at a time."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None = None):
        super().__init__()
        if weight.dtype != FP8_DTYPE or weight.dim() != 3:
            raise ValueError(f"weight must be float8_e4m3fn [E, N, K], got {weight.dtype} {tuple(weight.shape)}")
        e, n, k = weight.shape
        want = (e, n) if block is None else (e, math.ceil(n / block[0]), math.ceil(k / block[1]))
        if tuple(scale.shape) != want:
            raise ValueError(f"scale shape {tuple(scale.shape)} != {want} for experts {(e, n, k)} block {block}")
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale.float())
        self.block = None if block is None else tuple(block)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.weight.shape)  # type: ignore[return-value]

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    def extra_repr(self) -> str:
        e, n, k = self.shape
        kind = "per-channel" if self.block is None else f"{self.block[0]}x{self.block[1]} blocks"
        return f"{e} experts x {n}x{k}, fp8 e4m3 {kind}"

    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size() + self.scale.numel() * self.scale.element_size()

    def kernel_experts(self):
        """The grouped kernels' view of these experts (hinfer.ops.triton.moe.Fp8Experts), or None for blocks they
        do not take (the reference body runs those)."""
        if self.block not in (None, BLOCK):
            return None
        from hinfer.ops.triton.moe import Fp8Experts

        return Fp8Experts(self.weight, self.scale, self.block is not None)

    def expert(self, e: int) -> Fp8Weight:
        """Expert e's [N, K] weight (views of this object's buffers)."""
        return Fp8Weight(self.weight[e], self.scale[e], self.block)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """All experts [E, N, K], each exactly `expert(e).dequantize(dtype)` (tests and tools; the reference body
        dequantizes one expert at a time)."""
        if self.block is None:
            return (self.weight.float() * self.scale[..., None]).to(dtype)
        return dequantize_fp8_block(self.weight, self.scale, self.block, dtype)


@torch.no_grad()
def quantize_experts_fp8(w: torch.Tensor, scheme: str = "channel") -> Fp8ExpertsWeight:
    """e4m3 of every expert of w [E, N, K], each expert exactly `hinfer.quant.fp8.quantize_fp8(w[e], scheme)`:
    "channel" runs it on the [E*N, K] stack (row-wise scales: identical to expert by expert; its row chunks bound
    the fp32 temporaries), "block" the 128x128 block quantizer expert by expert (one matrix of fp32 at a time)."""
    if w.dim() != 3:
        raise ValueError(f"quantize_experts_fp8 takes an [E, N, K] weight, got {tuple(w.shape)}")
    e, n, k = w.shape
    if scheme == "block":
        q, s = quantize_fp8_block(w, BLOCK)
        return Fp8ExpertsWeight(q, s, BLOCK)
    if scheme != "channel":
        raise ValueError(f"unknown fp8 scale scheme {scheme!r} (channel | block)")
    flat = quantize_fp8(w.reshape(e * n, k), "channel")
    return Fp8ExpertsWeight(flat.weight.view(e, n, k), flat.scale.view(e, n))


def quantize_experts(w: torch.Tensor, recipe) -> Int4ExpertsWeight | Fp8ExpertsWeight:
    """The routed experts w [E, N, K] in `recipe`'s format (a hinfer.quant.recipes.QuantRecipe: int4 or fp8)."""
    if recipe.fmt == "int4":
        return quantize_experts_int4(w, recipe.int4_group, recipe.int4_zero_point)
    if recipe.fmt == "fp8":
        return quantize_experts_fp8(w, recipe.fp8_scales)
    raise ValueError(f"recipe {recipe.name} converts nothing")


def append_expert(experts, dense):
    """The experts [E, N, K] with one more, `dense` [N, K], as expert E (a new tensor or module; the inputs are
    left as they were), or None when the two are stored differently (format, group, zero points, fp8 blocks)."""
    if isinstance(experts, torch.Tensor) and isinstance(dense, torch.Tensor):
        ok = experts.dtype == dense.dtype and tuple(experts.shape[1:]) == tuple(dense.shape)
        return torch.cat([experts, dense[None].to(experts.device)]) if ok else None
    if isinstance(experts, Int4ExpertsWeight) and isinstance(dense, Int4Weight):
        ok = (experts.group == dense.group and experts.shape[1:] == dense.shape and experts.dtype == dense.dtype
              and (experts.zeros is None) == (dense.zeros is None) and experts.words == "rows")  # fmt: skip
        if not ok:
            return None
        cat = lambda a, b: torch.cat([a, b[None]])  # noqa: E731
        zeros = None if experts.zeros is None else cat(experts.zeros, dense.zeros)
        return Int4ExpertsWeight(cat(experts.qweight, dense.qweight), cat(experts.scales, dense.scales), zeros,
                                 experts.in_features, experts.group)  # fmt: skip
    if isinstance(experts, Fp8ExpertsWeight) and isinstance(dense, Fp8Weight):
        if experts.block != dense.block or tuple(experts.weight.shape[1:]) != tuple(dense.weight.shape):
            return None
        return Fp8ExpertsWeight(torch.cat([experts.weight, dense.weight[None]]),
                                torch.cat([experts.scale, dense.scale[None]]), experts.block)  # fmt: skip
    return None
