"""y = x @ W^T. W is a plain tensor [out, in] or a quantized weight object with `.matmul(x)` (fp8, int4)."""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F


class QuantizedWeight(Protocol):
    shape: tuple[int, int]  # logical [out, in]

    def matmul(self, x: torch.Tensor) -> torch.Tensor: ...


def linear(x: torch.Tensor, weight: torch.Tensor | QuantizedWeight) -> torch.Tensor:
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight)
    return weight.matmul(x)
