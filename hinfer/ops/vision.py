"""The vision tower's ops: biased projections, LayerNorm, GELU, 2D rotary, and bidirectional attention per image.

Torch bodies only: on the GPU they are cuBLAS GEMMs and PyTorch's fused SDPA (flash) kernels already, and the
encoder runs once per image, in the prefill step that needs it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinfer.ops.rope import apply_rope_ref


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x @ W^T + b, the bias added inside the GEMM (one rounding, as nn.Linear does)."""
    return F.linear(x, weight, bias)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def vision_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, D] rotated over the whole head (cos/sin [N, D] fp32), in fp32, back in x's dtype."""
    return apply_rope_ref(x.float(), cos, sin).to(x.dtype)


def vision_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: list[int], scale: float
) -> torch.Tensor:
    """q, k, v [N, heads, D]; every patch sees every patch of its own frame (segments cu_seqlens) -> [N, heads, D].
    Each frame goes in as a batch of one, [1, heads, n, D]: SDPA's fused (flash, memory-efficient) kernels take
    4-D inputs only, and a 3-D call falls back to the math kernel, which materialises the n x n scores per head
    in fp32 (1 GB a layer at 4,096 patches)."""
    out = torch.empty_like(q)
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))  # [1, heads, n, D]
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, scale=scale)[0].transpose(0, 1)
    return out
