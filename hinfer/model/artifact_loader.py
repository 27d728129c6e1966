"""Build the model from a `.hinfer` artifact: on the meta device, then every stored tensor (and quantized
object, rebuilt from its buffers) put in place straight from the memory-mapped file (docs/artifact.md). The
vision tower (`visual.*`) is built on the device and filled by the checkpoint loader's checks."""

from __future__ import annotations

import torch
from safetensors import safe_open
from torch import nn

from hinfer.config import ModelConfig
from hinfer.model.qwen3_5 import Attention, Qwen35ForCausalLM
from hinfer.model.vision import VisionEncoder
from hinfer.model.vision_loader import load_vision_weights
from hinfer.ops.rope import model_rope
from hinfer.weights.artifact import VISUAL, Artifact, ArtifactError, build_quantized


def load_artifact_model(
    art: Artifact, cfg: ModelConfig, dtype: torch.dtype, device: torch.device, with_mtp: bool = False,
    with_vision: bool = True,
) -> Qwen35ForCausalLM:
    """The model with every tensor of the file in place (MTP tensors skipped unless with_mtp; the vision tower's
    unless with_vision, or when the file has none)."""
    net = Qwen35ForCausalLM(cfg, dtype=dtype, device="meta", with_mtp=with_mtp)
    skip = lambda n: (net.mtp is None and n.startswith("mtp.")) or n.startswith(VISUAL)  # noqa: E731
    dev = f"cuda:{device.index or 0}" if device.type == "cuda" else str(device)
    used: set[str] = set()
    with safe_open(str(art.path), framework="pt", device=dev) as f:
        names = set(f.keys())

        def get(name: str, optional: bool = False) -> torch.Tensor | None:
            if name not in names:
                if optional:
                    return None
                raise ArtifactError(f"{art.path}: missing tensor {name!r}")
            used.add(name)
            return f.get_tensor(name)

        with torch.no_grad():
            for path, spec in art.layout.items():
                if net.mtp is None and path.startswith("mtp."):
                    continue
                parent, _, attr = path.rpartition(".")
                mod = net.get_submodule(parent)
                mod._parameters.pop(attr, None)
                setattr(mod, attr, build_quantized(spec, path, get, dtype))
            for name, t in net.state_dict(keep_vars=True).items():
                if t.is_meta:
                    _place(net, name, get(name), dtype)
        if with_vision and art.has_visual:
            _load_visual(net, f, [n for n in f.keys() if n.startswith(VISUAL)], dtype, device, str(art.path))
    for m in net.modules():
        if isinstance(m, Attention):  # non-persistent: not stored, recomputed
            m.inv_freq = model_rope(cfg, device)[0]
    extra = sorted(n for n in names - used if not skip(n))
    if extra:
        raise ArtifactError(f"{art.path}: unexpected tensor {extra[0]!r} (not part of this model's config)")
    return net


def _load_visual(net: Qwen35ForCausalLM, f, names: list[str], dtype: torch.dtype, device: torch.device,
                 source: str) -> None:  # fmt: skip
    vision = net.cfg.vision
    if vision is None:
        raise ArtifactError(f"{source}: holds vision tensors but its config has no vision_config")
    net.visual = VisionEncoder(vision, dtype=dtype, device=device)
    load_vision_weights(net.visual, ((n.removeprefix(VISUAL), f.get_tensor(n)) for n in names), source)


def _place(net: nn.Module, name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    parent, _, attr = name.rpartition(".")
    mod = net.get_submodule(parent)
    old = mod._parameters.get(attr)
    want = tuple(old.shape) if old is not None else tuple(mod._buffers[attr].shape)
    if tuple(t.shape) != want:
        raise ArtifactError(f"tensor {name!r} has shape {list(t.shape)}, expected {list(want)} for this config")
    if t.is_floating_point() and t.dtype != dtype:
        t = t.to(dtype)
    if old is not None:
        mod._parameters[attr] = nn.Parameter(t, requires_grad=False)
    else:
        mod._buffers[attr] = t
