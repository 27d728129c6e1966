"""Partial rotary embedding (NeoX rotate-half) on the first `rotary_dim` dims of each head.

Qwen3.5's rotary is multi-axis: each frequency turns with one of three position streams (t, h, w), assigned
interleaved (`mrope_freq_axes`). For text the three are equal, so plain positions [T] suffice; image tokens
bring positions [3, T].
"""

from __future__ import annotations

import torch


def rope_inv_freq(rotary_dim: int, theta: float, device: torch.device | str | None = None) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))


def mrope_freq_axes(n_freqs: int, section: tuple[int, int, int]) -> torch.Tensor:
    """[n_freqs] int64, the position stream of each frequency: t, h, w, t, h, w, ... (0, 1, 2), with h taking
    at most section[1] frequencies and w section[2]; the rest turn with t."""
    axes = []
    for i in range(n_freqs):
        if i % 3 == 1 and i < 3 * section[1]:
            axes.append(1)
        elif i % 3 == 2 and i < 3 * section[2]:
            axes.append(2)
        else:
            axes.append(0)
    return torch.tensor(axes, dtype=torch.int64)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, freq_axes: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim], computed in fp32 then cast (as the reference does). positions [T], or [3, T]
    with freq_axes [R/2] naming the stream each frequency follows."""
    if positions.dim() == 1:
        freqs = positions.float()[:, None] * inv_freq[None, :]
    else:
        assert freq_axes is not None, "multi-axis positions need the frequencies' axes"
        freqs = positions.float()[freq_axes].T * inv_freq[None, :]  # [T, R/2]: frequency i at its axis' position
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
