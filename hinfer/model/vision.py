"""The Qwen3.5 vision tower: patches -> ViT blocks with 2D rotary -> 2x2 merge into the language model's width.

    x   = PatchEmbed(pixels) + bilinear(pos_embed, grid)           one row per 16x16 patch (x 2 frames)
    x   = x + Attn(LN1(x)), rotary on (row, col), one frame attends to itself
    x   = x + MLP(LN2(x)),  gelu-tanh
    out = fc2(gelu(fc1(LN(x) viewed as merge x merge patches per row)))   one row per language-model token

Parameters carry the checkpoint's names (under `model.visual.`), so the loader copies them one to one.
"""

from __future__ import annotations

import torch
from torch import nn

from hinfer.model.vision_grid import Grid, frame_cu_seqlens, patch_rows_cols, pos_embed_taps
from hinfer.ops.rope import rope_inv_freq
from hinfer.ops.vision import affine, gelu, gelu_tanh, layer_norm, vision_attention, vision_rope
from hinfer.vision_config import VisionConfig

LN_EPS = 1e-6


def _param(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class Affine(nn.Module):
    """A projection with bias: weight [out, in], bias [out]."""

    def __init__(self, out_f: int, in_f: int, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.weight = _param(out_f, in_f, dtype=dtype, device=device)
        self.bias = _param(out_f, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return affine(x, self.weight, self.bias)


class LayerNorm(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.weight = _param(dim, dtype=dtype, device=device)
        self.bias = _param(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, LN_EPS)


class PatchEmbed(nn.Module):
    """The checkpoint's Conv3d with stride == kernel: one GEMM over flattened (channel, frame, row, col) patches."""

    def __init__(self, cfg: VisionConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        c, t, p = cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size
        self.proj = nn.Module()
        self.proj.weight = _param(cfg.hidden_size, c, t, p, p, dtype=dtype, device=device)
        self.proj.bias = _param(cfg.hidden_size, dtype=dtype, device=device)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        w = self.proj.weight
        return affine(pixels.to(w.dtype), w.reshape(w.shape[0], -1), self.proj.bias)


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.n_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv = Affine(3 * cfg.hidden_size, cfg.hidden_size, dtype, device)
        self.proj = Affine(cfg.hidden_size, cfg.hidden_size, dtype, device)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: list[int]
    ) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.n_heads, self.head_dim).unbind(1)
        q, k = vision_rope(q, cos, sin), vision_rope(k, cos, sin)
        o = vision_attention(q, k, v, cu_seqlens, self.head_dim**-0.5)
        return self.proj(o.reshape(n, -1))


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.linear_fc1 = Affine(cfg.intermediate_size, cfg.hidden_size, dtype, device)
        self.linear_fc2 = Affine(cfg.hidden_size, cfg.intermediate_size, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(gelu_tanh(self.linear_fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.norm1 = LayerNorm(cfg.hidden_size, dtype, device)
        self.attn = VisionAttention(cfg, dtype, device)
        self.norm2 = LayerNorm(cfg.hidden_size, dtype, device)
        self.mlp = VisionMLP(cfg, dtype, device)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cu_seqlens: list[int]
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, cu_seqlens)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """LayerNorm per patch, then the merge x merge patches of one token side by side through a GELU MLP."""

    def __init__(self, cfg: VisionConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.merged = cfg.hidden_size * cfg.merge_unit
        self.norm = LayerNorm(cfg.hidden_size, dtype, device)
        self.linear_fc1 = Affine(self.merged, self.merged, dtype, device)
        self.linear_fc2 = Affine(cfg.out_hidden_size, self.merged, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(gelu(self.linear_fc1(self.norm(x).view(-1, self.merged))))


class VisionEncoder(nn.Module):
    def __init__(
        self, cfg: VisionConfig, dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu"
    ):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg, dtype, device)
        self.pos_embed = nn.Module()
        self.pos_embed.weight = _param(
            cfg.num_position_embeddings, cfg.hidden_size, dtype=dtype, device=device
        )
        self.blocks = nn.ModuleList([VisionBlock(cfg, dtype, device) for _ in range(cfg.depth)])
        self.merger = PatchMerger(cfg, dtype, device)
        # rows and columns rotate a quarter of the head's frequencies each: the same table for both axes
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim // 2, cfg.rope_theta, device=device), persistent=False
        )

    def rotary(self, grids: list[Grid], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [N, head_dim] fp32: angles [row freqs | col freqs], twice (rotate-half layout)."""
        rc = patch_rows_cols(grids, self.cfg.spatial_merge_size, device).float()
        angles = (rc[:, :, None] * self.inv_freq).flatten(1)  # [N, 2 * head_dim/4]: rows then cols
        emb = torch.cat([angles, angles], dim=-1)
        return emb.cos(), emb.sin()

    def position_embedding(self, grids: list[Grid], device: torch.device) -> torch.Tensor:
        idx, wts = pos_embed_taps(grids, self.cfg.grid_side, self.cfg.spatial_merge_size)
        taps = self.pos_embed.weight[idx.to(device)]  # [N, 4, D]
        return (taps * wts.to(device)[:, :, None]).sum(1)  # fp32 weights: the sum is fp32

    def forward(self, pixels: torch.Tensor, grids: list[Grid]) -> torch.Tensor:
        """pixels [N, patch_dim] (the preprocessor's rows, images concatenated) -> [N / merge^2, out_hidden]."""
        dev = self.pos_embed.weight.device
        x = self.patch_embed(pixels.to(dev))
        x = x + self.position_embedding(grids, dev).to(x.dtype)
        cos, sin = self.rotary(grids, dev)
        cu = frame_cu_seqlens(grids)
        for block in self.blocks:
            x = block(x, cos, sin, cu)
        return self.merger(x)
