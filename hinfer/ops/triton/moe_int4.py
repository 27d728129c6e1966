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
    qweight: torch.Tensor  # int32 [E, N, K/8] (`rows`), else [E, N/16, 2K]
    scales: torch.Tensor  # [E, N, G]
    zeros: torch.Tensor | None  # uint8 [E, N, G]
    in_features: int  # K
    # the words' order (hinfer.quant.int4_mma_layout): `rows`, or `stripes`, the row words stripe by stripe
    # (stripe_experts, gate_up's rows paired: 8 gate rows with their 8 up rows a 16-row stripe); the grouped and
    # tensor-core kernels read both
    words: str = "rows"

    @property
    def shape(self) -> tuple[int, int, int]:
        n = self.qweight.shape[1] * (16 if self.words == "stripes" else 1)
        return (self.qweight.shape[0], n, self.in_features)
