"""INT4 (W4A16, group 128) routed experts as the grouped expert kernels take them.

Per expert, exactly hinfer.quant.int4's layout, stacked on a leading expert dim: qweight int32 [E, N, K/8]
(element 8c + e at bits 4*POS[e] of word c, unsigned u; hinfer.quant.int4 explains the order), scales
[E, N, ceil(K/128)] in the model dtype, zeros uint8 [E, N, G] (asymmetric) or None (symmetric, zero 8);
w = (u - zero) * scale. gate_up is [E, 2I, H] (gate rows then up rows), down [E, H, I], as the bf16 experts.
The model holds quantized experts as hinfer.quant.experts.Int4ExpertsWeight (an nn.Module with the same tensors,
its quantizer and its reference body); hinfer.ops.moe.moe_experts hands them to the kernels as this tuple.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Int4Experts(NamedTuple):
    qweight: torch.Tensor  # int32 [E, N, K/8]
    scales: torch.Tensor  # [E, N, G]
    zeros: torch.Tensor | None  # uint8 [E, N, G]
    in_features: int  # K

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.qweight.shape[0], self.qweight.shape[1], self.in_features)
