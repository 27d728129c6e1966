"""Partial rotary embedding (NeoX rotate-half) on the first `rotary_dim` dims of each head.

Qwen3.5's mrope reduces to plain RoPE for text (all three position streams equal), so text positions suffice.
"""

from __future__ import annotations

import torch


def rope_inv_freq(rotary_dim: int, theta: float, device: torch.device | str | None = None) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim], computed in fp32 then cast (as the reference does)."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D]; cos/sin [T, R] with R <= D; rotates the first R dims, passes the rest."""
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    x1, x2 = x_rot[..., : r // 2], x_rot[..., r // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    out = x_rot * cos[:, None, :] + rotated * sin[:, None, :]
    return torch.cat([out, x_pass], dim=-1)
