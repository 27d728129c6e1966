"""VisionConfig: the vision tower's shape and the image token ids, from a multimodal config.json.

The Qwen3.5/3.6 checkpoints (model_type qwen3_5 / qwen3_5_moe) carry `vision_config` next to `text_config`,
and the image token ids at the top level. Text-only model types have neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hinfer.errors import ConfigError

VISION_ACTS = ("gelu_pytorch_tanh",)
DEFAULT_MAX_PIXELS = 16777216  # the released preprocessor_config.json's size.longest_edge (4096 x 4096)


@dataclass(frozen=True)
class VisionConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int  # the language model's hidden size: the merger projects into it
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    num_position_embeddings: int = 2304  # a square grid of learned positions, resampled to each image
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10000.0
    image_token_id: int = 248056
    video_token_id: int = 248057
    vision_start_token_id: int = 248053
    vision_end_token_id: int = 248054

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def merge_unit(self) -> int:
        """Patches merged into one language-model token."""
        return self.spatial_merge_size**2

    @property
    def patch_dim(self) -> int:
        """Values of one flattened patch: channels x frames x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def grid_side(self) -> int:
        return int(self.num_position_embeddings**0.5)

    @property
    def param_count(self) -> int:
        """Parameters of the tower (what model/vision.py builds), counted without torch for `hinfer plan`."""
        h, i, m = self.hidden_size, self.intermediate_size, self.hidden_size * self.merge_unit
        block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (i * h + i) + (h * i + h)
        merger = 2 * h + (m * m + m) + (self.out_hidden_size * m + self.out_hidden_size)
        return h * self.patch_dim + h + self.num_position_embeddings * h + self.depth * block + merger

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> VisionConfig | None:
        """The vision config of a multimodal config.json, or None when it has none."""
        v = raw.get("vision_config")
        if v is None:
            return None
        if not isinstance(v, dict):
            raise ConfigError(f"{source}: vision_config must be an object")

        def need(key: str) -> Any:
            if key not in v:
                raise ConfigError(f"{source}: vision_config is missing required field {key!r}")
            return v[key]

        if v.get("deepstack_visual_indexes"):
            raise ConfigError(
                f"{source}: vision_config.deepstack_visual_indexes is not supported (Qwen3.5 has none)"
            )
        act = v.get("hidden_act", "gelu_pytorch_tanh")
        if act not in VISION_ACTS:
            raise ConfigError(
                f"{source}: vision_config.hidden_act {act!r} is not supported (only {VISION_ACTS})"
            )
        rope = v.get("rope_parameters") or {}
        cfg = cls(
            depth=int(need("depth")),
            hidden_size=int(need("hidden_size")),
            intermediate_size=int(need("intermediate_size")),
            num_heads=int(need("num_heads")),
            out_hidden_size=int(need("out_hidden_size")),
            in_channels=int(v.get("in_channels", 3)),
            patch_size=_int(v.get("patch_size", 16), source, "patch_size"),
            temporal_patch_size=_int(v.get("temporal_patch_size", 2), source, "temporal_patch_size"),
            spatial_merge_size=int(v.get("spatial_merge_size", 2)),
            num_position_embeddings=int(v.get("num_position_embeddings", 2304)),
            hidden_act=act,
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            image_token_id=int(raw.get("image_token_id", 248056)),
            video_token_id=int(raw.get("video_token_id", 248057)),
            vision_start_token_id=int(raw.get("vision_start_token_id", 248053)),
            vision_end_token_id=int(raw.get("vision_end_token_id", 248054)),
        )
        if cfg.hidden_size % cfg.num_heads or cfg.head_dim % 4:
            raise ConfigError(
                f"{source}: vision head_dim must be a multiple of 4 (2D rotary halves it twice)"
            )
        if cfg.grid_side**2 != cfg.num_position_embeddings:
            raise ConfigError(f"{source}: vision_config.num_position_embeddings must be a square")
        return cfg


def _int(x: Any, source: str, key: str) -> int:
    """An int, or a list of equal ints (transformers allows [16, 16])."""
    if isinstance(x, list | tuple):
        if len(set(x)) != 1:
            raise ConfigError(f"{source}: vision_config.{key} {x} must be one size")
        x = x[0]
    return int(x)
