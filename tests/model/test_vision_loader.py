"""The vision tower loads from a checkpoint's `model.visual.*` tensors: names and shapes equal the released
27B listing, a save_pretrained checkpoint round-trips, bad checkpoints fail with the tensor named, --no-vision
skips the tower and the memory plan counts it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import vision_helpers as V
from safetensors.torch import load_file, save_file

from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import _load_vision
from hinfer.engine.memory_plan import plan_memory
from hinfer.errors import CheckpointError
from hinfer.fixtures import config_dir, fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.vision import VisionEncoder
from hinfer.model.vision_loader import load_vision_weights
from hinfer.weights.hf_reader import HFCheckpoint

pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"  # as tests/engine/test_memory_plan.py
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    hf = V.hf_multimodal(fixed_test_seed())
    path = tmp_path_factory.mktemp("mm")
    hf.save_pretrained(path)
    return hf, path


def test_names_and_shapes_equal_the_released_27b_listing() -> None:
    ref_file = config_dir("qwen3.6-27b")
    listing = FIXTURES / "reference" / "qwen3.6-27b.tensors.json"
    if not listing.is_file():
        pytest.skip(f"the released tensor listing is not here ({listing})")
    ref = json.loads(listing.read_text())["tensors"]
    want = {
        n.removeprefix("model.visual."): tuple(t["shape"])
        for n, t in ref.items()
        if n.startswith("model.visual.")
    }
    assert ref_file is not None
    vision = load_model_config(ref_file).vision
    assert vision is not None
    ours = {n: tuple(p.shape) for n, p in VisionEncoder(vision, device="meta").named_parameters()}
    assert ours == want
    assert vision.param_count == sum(torch.Size(s).numel() for s in want.values())


def test_checkpoint_round_trip(saved) -> None:
    hf, path = saved
    ckpt = HFCheckpoint(path)
    assert ckpt.has_visual
    assert not any("visual" in n for n in ckpt.tensor_names())  # the text stream stays text
    visual = VisionEncoder(ckpt.config.vision, dtype=torch.bfloat16)
    load_vision_weights(visual, ckpt.iter_visual(torch.bfloat16), str(path))
    for name, p in hf.model.visual.state_dict().items():
        assert torch.equal(dict(visual.named_parameters())[name], p.to(torch.bfloat16)), name


@pytest.mark.parametrize("damage, message", [
    ("drop", "missing vision tensor 'model.visual.merger.linear_fc2.bias'"),
    ("reshape", "has shape \\[7\\]"),
    ("extra", "unexpected vision tensor 'model.visual.blocks.9.norm1.weight'"),
])  # fmt: skip
def test_bad_vision_tensors_are_named(saved, tmp_path: Path, damage: str, message: str) -> None:
    _, path = saved
    tensors = load_file(str(path / "model.safetensors"))
    key = "model.visual.merger.linear_fc2.bias"
    if damage == "drop":
        del tensors[key]
    elif damage == "reshape":
        tensors[key] = torch.zeros(7)
    else:
        tensors["model.visual.blocks.9.norm1.weight"] = torch.zeros(32)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    ckpt = HFCheckpoint(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        load_vision_weights(
            VisionEncoder(ckpt.config.vision, dtype=torch.float32), ckpt.iter_visual(), "ckpt"
        )


def test_no_vision_skips_the_tower(saved) -> None:
    _, path = saved
    ckpt = HFCheckpoint(path)
    for flag, built in [(True, True), (False, False)]:
        net = Qwen35ForCausalLM(load_model_config(path), dtype=torch.float32)
        _load_vision(net, ckpt, EngineConfig(vision=flag), torch.float32, torch.device("cpu"))
        assert (net.visual is not None) == built


def test_memory_plan_counts_the_tower() -> None:
    path = config_dir("qwen3.6-27b")
    assert path is not None
    cfg = load_model_config(path)
    ecfg = EngineConfig(device="cuda", max_concurrency=2, max_context=4096)
    with_v = plan_memory(cfg, ecfg, weights="bf16", device_bytes=140 * 2**30, device_name="test")
    without = plan_memory(cfg, replace(ecfg, vision=False), weights="bf16", device_bytes=140 * 2**30,
                          device_name="test")  # fmt: skip
    row = next(r for r in with_v.rows if r.name == "vision tower")
    assert row.bytes > 2 * cfg.vision.param_count  # weights in bf16, plus encoding one image
    assert "vision tower" not in [r.name for r in without.rows]
    assert with_v.total - without.total == row.bytes
