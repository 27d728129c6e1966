"""Names, shapes and roles of the vision tower's tensors in a Hugging Face Qwen3.5 checkpoint (`model.visual.*`),
from its vision_config alone: what `hinfer synth --vision` writes and model/vision.py loads one to one.

Roles tell synth how to fill each tensor: `vision_norm` (LayerNorm weights, plain: near 1), `vision_bias`,
`vision_pos` (the learned position grid), `vision_linear` (projections, the patch embedding's Conv3d included:
fan-in is every dim after the first) and `vision_linear_out` (what each block adds to its residual stream).
The tower is never quantized: every tensor is in the checkpoint's activation dtype.
"""

from __future__ import annotations

import torch

from hinfer.vision_config import VisionConfig
from hinfer.weights.hf_layout import TensorSpec

VISUAL_PREFIX = "model.visual."
VISION_ROLES = frozenset({"vision_norm", "vision_bias", "vision_pos", "vision_linear", "vision_linear_out"})


def visual_tensor_specs(v: VisionConfig, dtype: torch.dtype = torch.bfloat16) -> dict[str, TensorSpec]:
    """Every tensor of the tower, full names, in model order."""
    h, i, m = v.hidden_size, v.intermediate_size, v.hidden_size * v.merge_unit
    out: dict[str, TensorSpec] = {}

    def add(name: str, *shape: int, role: str) -> None:
        out[VISUAL_PREFIX + name] = TensorSpec(tuple(shape), dtype, role)

    def affine(name: str, rows: int, cols: int, role: str = "vision_linear") -> None:
        add(f"{name}.weight", rows, cols, role=role)
        add(f"{name}.bias", rows, role="vision_bias")

    def norm(name: str) -> None:
        add(f"{name}.weight", h, role="vision_norm")
        add(f"{name}.bias", h, role="vision_bias")

    add("patch_embed.proj.weight", h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size,
        role="vision_linear")  # fmt: skip
    add("patch_embed.proj.bias", h, role="vision_bias")
    add("pos_embed.weight", v.num_position_embeddings, h, role="vision_pos")
    for b in range(v.depth):
        p = f"blocks.{b}"
        norm(f"{p}.norm1")
        affine(f"{p}.attn.qkv", 3 * h, h)
        affine(f"{p}.attn.proj", h, h, "vision_linear_out")
        norm(f"{p}.norm2")
        affine(f"{p}.mlp.linear_fc1", i, h)
        affine(f"{p}.mlp.linear_fc2", h, i, "vision_linear_out")
    norm("merger.norm")
    affine("merger.linear_fc1", m, m)
    affine("merger.linear_fc2", v.out_hidden_size, m)
    return out
