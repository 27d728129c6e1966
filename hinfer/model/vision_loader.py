"""Load the vision tower from a checkpoint's `model.visual.*` tensors (names as stored, prefix stripped).

The tower keeps the activation dtype (bf16 on the GPU) whatever format the language model loads in. Every
parameter must come exactly once with its shape; anything else is a one-line CheckpointError.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from hinfer.errors import CheckpointError
from hinfer.model.vision import VisionEncoder


def load_vision_weights(
    visual: VisionEncoder, tensors: Iterable[tuple[str, torch.Tensor]], source: str = "checkpoint"
) -> None:
    params = dict(visual.named_parameters())
    seen: set[str] = set()
    for name, t in tensors:
        p = params.get(name)
        if p is None:
            raise CheckpointError(
                f"{source}: unexpected vision tensor 'model.visual.{name}' (not in vision_config)"
            )
        if name in seen:
            raise CheckpointError(f"{source}: vision tensor 'model.visual.{name}' appears twice")
        if tuple(t.shape) != tuple(p.shape):
            raise CheckpointError(f"{source}: vision tensor 'model.visual.{name}' has shape {list(t.shape)}, "
                                  f"expected {list(p.shape)} for this vision_config")  # fmt: skip
        with torch.no_grad():
            p.copy_(t)
        seen.add(name)
    missing = [n for n in params if n not in seen]
    if missing:
        raise CheckpointError(f"{source}: missing vision tensor 'model.visual.{missing[0]}'")
