"""INT4 (W4A16, group 128) routed experts: the container, a quantizer and the reference body.

Per expert, exactly hinfer.quant.int4's layout, stacked on a leading expert dim: qweight int32 [E, N, K/8]
(element 8c + e at bits 4*POS[e] of word c, unsigned u; hinfer.quant.int4 explains the order), scales
[E, N, ceil(K/128)] in the model dtype, zeros uint8 [E, N, G] (asymmetric) or None (symmetric, zero 8);
w = (u - zero) * scale. gate_up is [E, 2I, H] (gate rows then up rows), down [E, H, I], as the bf16 experts.
The model holds quantized experts as hinfer.quant.experts.Int4ExpertsWeight (an nn.Module with the same tensors);
hinfer.ops.moe.moe_experts hands them to the kernels as this tuple.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from hinfer.quant.int4 import GROUP, Int4Weight, quantize_int4


class Int4Experts(NamedTuple):
    qweight: torch.Tensor  # int32 [E, N, K/8]
    scales: torch.Tensor  # [E, N, G]
    zeros: torch.Tensor | None  # uint8 [E, N, G]
    in_features: int  # K

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.qweight.shape[0], self.qweight.shape[1], self.in_features)

    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.qweight, self.scales, self.zeros) if t is not None
        )

    def expert(self, e: int) -> Int4Weight:
        z = None if self.zeros is None else self.zeros[e]
        return Int4Weight(self.qweight[e], self.scales[e], z, self.in_features, GROUP)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.stack([self.expert(e).dequantize(dtype) for e in range(self.shape[0])])


@torch.no_grad()
def quantize_experts_int4(w: torch.Tensor, zero_point: bool = True) -> Int4Experts:
    """Round-to-nearest int4 of every expert of w [E, N, K] (hinfer.quant.int4.quantize_int4 per expert)."""
    parts = [quantize_int4(w[e], GROUP, zero_point) for e in range(w.shape[0])]
    z = torch.stack([p.zeros for p in parts]) if zero_point else None
    return Int4Experts(
        torch.stack([p.qweight for p in parts]), torch.stack([p.scales for p in parts]), z, w.shape[2]
    )


def moe_experts_int4_ref(
    x: torch.Tensor, w_gate_up: Int4Experts, w_down: Int4Experts, top_w: torch.Tensor, top_i: torch.Tensor
) -> torch.Tensor:
    """The semantics: hinfer.ops.moe.moe_experts_ref on the fp32 dequantized experts, in fp32, rounded once."""
    from hinfer.ops.moe import moe_experts_ref

    used = torch.unique(top_i)
    remap = torch.searchsorted(used, top_i)
    gu = torch.stack([w_gate_up.expert(e).dequantize(torch.float32) for e in used.tolist()])
    dn = torch.stack([w_down.expert(e).dequantize(torch.float32) for e in used.tolist()])
    return moe_experts_ref(x.float(), gu, dn, top_w.float(), remap).to(x.dtype)
