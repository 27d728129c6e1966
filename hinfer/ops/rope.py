"""Partial rotary embedding (NeoX rotate-half) on the first `rotary_dim` dims of each head.

Qwen3.5's mrope reduces to plain RoPE for text (all three position streams equal), so text positions suffice;
that holds under YaRN too, whose frequency blend is per frequency index, before the mrope sections pick
streams.
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


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, attn_factor: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, rotary_dim]: fp32 (times the attention factor), then cast, as transformers does."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
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
