"""What the vision tower costs the memory plan: its weights (activation dtype, never quantized) and the
activations of encoding the largest image the preprocessor lets through. Arithmetic only (no torch), so
`hinfer plan` stays light."""

from __future__ import annotations

from hinfer.config import EngineConfig, ModelConfig
from hinfer.vision_config import DEFAULT_MAX_PIXELS


def vision_weight_bytes(cfg: ModelConfig, ecfg: EngineConfig, act_bytes: int) -> int:
    if cfg.vision is None or not ecfg.vision:
        return 0
    return cfg.vision.param_count * act_bytes


def vision_activation_bytes(cfg: ModelConfig, ecfg: EngineConfig, act_bytes: int) -> int:
    """One image at the preprocessor's max_pixels: per patch its input row, a block's widest live tensors
    (residual, normed copy, q/k/v, the MLP's hidden) and fp32 cos/sin."""
    v = cfg.vision
    if v is None or not ecfg.vision:
        return 0
    patches = DEFAULT_MAX_PIXELS // v.patch_size**2
    per_patch = (v.patch_dim + 5 * v.hidden_size + v.intermediate_size) * act_bytes + 2 * v.head_dim * 4
    return patches * per_patch
