"""Partial rotary embedding (NeoX rotate-half) on the first `rotary_dim` dims of each head.

Qwen3.5's rotary is multi-axis: each frequency turns with one of three position streams (t, h, w), assigned
interleaved (`mrope_freq_axes`). For text the three are equal, so plain positions [T] suffice; image tokens
bring positions [3, T]. That holds under YaRN too, whose frequency blend is per frequency index, before the
streams are picked.
YaRN (transformers' `_compute_yarn_parameters`): the blend and its correction range are over the rotary dims
(64 of 256 on the real models, not head_dim), and the attention factor multiplies cos and sin in fp32 before
they are rounded to the model dtype.
"""

from __future__ import annotations

import math

import torch

from hinfer.config import ModelConfig, RopeScaling


def rope_inv_freq(rotary_dim: int, theta: float, device: torch.device | str | None = None) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))


def yarn_inv_freq(
    rotary_dim: int, theta: float, s: RopeScaling, device: torch.device | str | None = None
) -> torch.Tensor:
    """High frequencies (many turns inside the original window) kept, low ones divided by the factor, a linear
    ramp between the correction dims of beta_fast and beta_slow turns."""

    def correction_dim(turns: float) -> float:
        window = s.original_max_position_embeddings
        return rotary_dim * math.log(window / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # weight of the original frequency
    pos_freqs = theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    # the same operations as transformers, so the frequencies are bit-identical
    inv = 1.0 / (s.factor * pos_freqs) * (1 - extrapolation) + 1.0 / pos_freqs * extrapolation
    return inv.to(device)


def model_rope(cfg: ModelConfig, device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq [R/2] fp32, attention factor scaling cos and sin) of a model config."""
    if cfg.rope_scaling is None:
        return rope_inv_freq(cfg.rotary_dim, cfg.rope_theta, device), 1.0
    s = cfg.rope_scaling
    return yarn_inv_freq(cfg.rotary_dim, cfg.rope_theta, s, device), s.attention_factor


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
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    dtype: torch.dtype,
    attn_factor: float = 1.0,
    freq_axes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim]: fp32 (times the attention factor), then cast, as transformers does. positions
    [T], or [3, T] with freq_axes [R/2] naming the stream each frequency follows."""
    if positions.dim() == 1:
        freqs = positions.float()[:, None] * inv_freq[None, :]
    else:
        assert freq_axes is not None, "multi-axis positions need the frequencies' axes"
        freqs = positions.float()[freq_axes].T * inv_freq[None, :]  # [T, R/2]: frequency i at its axis' position
    emb = torch.cat([freqs, freqs], dim=-1)
    if attn_factor == 1.0:
        return emb.cos().to(dtype), emb.sin().to(dtype)
    return (emb.cos() * attn_factor).to(dtype), (emb.sin() * attn_factor).to(dtype)


def apply_rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D]; cos/sin [T, R] with R <= D; rotates the first R dims, passes the rest."""
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    x1, x2 = x_rot[..., : r // 2], x_rot[..., r // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    out = x_rot * cos[:, None, :] + rotated * sin[:, None, :]
    return torch.cat([out, x_pass], dim=-1)
