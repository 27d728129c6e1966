"""Tiny random vision towers for the vision tests: transformers' model and ours with the same weights.

Weights are refilled at O(1)-activation scales (unit-variance projections, LayerNorm weights near 1) so every
block changes the output and an error in any of them shows.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hinfer.model.vision import VisionEncoder
from hinfer.vision_config import VisionConfig

IMAGE, VIDEO, START, END = 500, 501, 502, 503  # placeholder and bracket ids inside the tiny vocabulary

# A real config's proportions, shrunk: 4x4-pixel patches, a 6x6 learned position grid, 2x2 merge.
TINY_VISION: dict[str, Any] = dict(
    depth=2,
    hidden_size=32,
    num_heads=4,
    intermediate_size=48,
    out_hidden_size=64,
    num_position_embeddings=36,
    patch_size=4,
    in_channels=3,
    temporal_patch_size=2,
    spatial_merge_size=2,
    hidden_act="gelu_pytorch_tanh",
    deepstack_visual_indexes=[],
)


def hf_vision_config(**over: Any) -> Any:
    from transformers import Qwen3_5VisionConfig

    return Qwen3_5VisionConfig(**(TINY_VISION | over))


def our_vision_config(**over: Any) -> VisionConfig:
    cfg = VisionConfig.from_dict({"vision_config": TINY_VISION | over})
    assert cfg is not None
    return cfg


def randomize_vision_(module: torch.nn.Module, seed: int, prefix: str = "") -> None:
    """Refill every parameter whose name starts with prefix (all by default)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if not name.startswith(prefix):
                continue
            if "norm" in name and name.endswith("weight"):
                v = torch.empty(p.shape).normal_(1.0, 0.1, generator=gen)
            elif name.endswith("bias"):
                v = torch.empty(p.shape).normal_(0.0, 0.1, generator=gen)
            elif name.endswith("pos_embed.weight"):
                v = torch.empty(p.shape).normal_(0.0, 1.0, generator=gen)
            else:
                fan_in = math.prod(p.shape[1:])
                v = torch.empty(p.shape).normal_(0.0, 1.0 / math.sqrt(fan_in), generator=gen)
            p.copy_(v)


def build_hf_vision(seed: int, **over: Any) -> torch.nn.Module:
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel

    torch.manual_seed(seed)
    model = Qwen3_5VisionModel(hf_vision_config(**over)).eval()
    randomize_vision_(model, seed)
    return model


def ours_from_hf(hf: torch.nn.Module, dtype: torch.dtype = torch.float32, **over: Any) -> VisionEncoder:
    """Our encoder holding the transformers model's weights (the parameter names are the checkpoint's)."""
    ours = VisionEncoder(our_vision_config(**over), dtype=dtype)
    state = {k: v.to(dtype) for k, v in hf.state_dict().items()}
    missing, unexpected = ours.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return ours


def random_pixels(grids: list[tuple[int, int, int]], patch_dim: int, seed: int) -> torch.Tensor:
    """Preprocessed-looking rows: values in [-1, 1], one row per patch."""
    n = sum(t * h * w for t, h, w in grids)
    return torch.rand(n, patch_dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def hf_multimodal(seed: int) -> torch.nn.Module:
    """A tiny Qwen3_5ForConditionalGeneration: the "odd" text variant (interleaved mrope) plus TINY_VISION."""
    import hf_helpers as H
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text = H.hf_config("odd").to_dict()  # interleaved mrope section [2, 1, 1] over 4 rotary frequencies
    text["rope_parameters"]["mrope_section"] = [2, 1, 1]
    text["rope_parameters"]["rope_theta"] = 100.0  # so image positions (a few apart) turn the angles visibly
    vision = hf_vision_config(out_hidden_size=text["hidden_size"]).to_dict()
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=IMAGE, video_token_id=VIDEO,
                        vision_start_token_id=START, vision_end_token_id=END)  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    H.randomize_(model, seed)
    randomize_vision_(model, seed, prefix="model.visual.")
    return model
