"""Helpers shared by the MoE kernels: output allocation (tests poison it)."""

from __future__ import annotations

import torch


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every MoE output and scratch buffer comes from here (tests patch it to poison with NaN / junk)."""
    return torch.empty(shape, dtype=dtype, device=device)
