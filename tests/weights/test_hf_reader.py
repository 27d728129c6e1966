"""HFCheckpoint over synthetic checkpoints: names and shapes round trip, FP8 dequantization, vision
skipping, single-file layout, and one-line errors that name the broken file."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hinfer.config import load_model_config
from hinfer.errors import CheckpointError, ConfigError, HinferError
from hinfer.weights.hf_layout import hf_tensor_specs, strip_prefix
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.synth import synth_tensor, write_synthetic_checkpoint


def synth(src: Path, out: Path, overrides: dict, tok: Path, **kw) -> Path:
    return write_synthetic_checkpoint(src, out, layers=4, overrides=overrides, tokenizer_dir=tok,
                                      progress=False, **kw)


def stored(ck_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor as stored, full names (for expectations computed outside the reader)."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted(ck_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            out.update({k: h.get_tensor(k) for k in h.keys()})  # noqa: SIM118
    return out


@pytest.mark.parametrize(
    ("fixture", "text_type", "fused", "fp8"),
    [("dense", False, False, False), ("dense", True, False, True), ("moe", False, False, False),
     ("moe", False, True, True), ("moe", True, True, False), ("tied", False, False, False)],
)
def test_round_trip_names_and_shapes(fx, tmp_path, tiny_dense, tiny_moe, text_config_from, fixture, text_type,
                                     fused, fp8):
    src = getattr(fx, fixture)
    if text_type:
        src = text_config_from(src)
    ck_dir = synth(src, tmp_path / "ck", tiny_moe if fixture == "moe" else tiny_dense, fx.tokenizer,
                   fused_experts=fused, fp8=fp8, shard_bytes=60_000)
    index = json.loads((ck_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # really sharded
    cfg = load_model_config(ck_dir)
    prefix = "model." if text_type else "model.language_model."
    full = hf_tensor_specs(cfg, fp8=fp8, fused_experts=fused)
    assert set(index["weight_map"]) == set(full)
    assert all(n.startswith((prefix, "lm_head.", "mtp.")) for n in full)
    assert index["metadata"]["total_size"] == sum(math.prod(s.shape) * s.dtype.itemsize for s in full.values())

    ck = HFCheckpoint(ck_dir)
    assert (ck.quantization is not None) == fp8 and ck.is_fp8 == fp8
    bf16 = {strip_prefix(n): s for n, s in hf_tensor_specs(cfg, fused_experts=fused).items()}
    got = {}
    for name, t in ck.iter_tensors(progress=False):
        assert name not in got
        got[name] = t
        assert t.dtype == torch.bfloat16, name
    assert list(got) == ck.tensor_names()
    assert {n: tuple(t.shape) for n, t in got.items()} == {n: s.shape for n, s in bf16.items()}
    assert ("lm_head.weight" in got) == (fixture != "tied")
    assert "mtp.fc.weight" in got and "layers.3.self_attn.q_proj.weight" in got


def test_fp8_dequantized_exactly(fx, tmp_path, tiny_dense):
    # 200x136 / 136x200 MLP and 128x136 projections: partial edge blocks on both axes with block 128
    over = {**tiny_dense, "hidden_size": 136, "intermediate_size": 200}
    ck_dir = synth(fx.dense, tmp_path / "ck", over, fx.tokenizer, fp8=True)
    raw = stored(ck_dir)
    ck = HFCheckpoint(ck_dir)
    assert ck.fp8_block == (128, 128)
    assert ck.quantization["weight_block_size"] == [128, 128]
    n_fp8 = 0
    for name, t in ck.iter_tensors(progress=False):
        full = next(f for f in (f"model.language_model.{name}", name) if f in raw)
        scale = raw.get(full + "_scale_inv")
        if scale is None:
            assert torch.equal(t, raw[full]), name
            continue
        n_fp8 += 1
        w = raw[full]
        assert w.dtype == torch.float8_e4m3fn
        # expectation: each element times the scale of its 128x128 block (rows r//128, cols c//128)
        rows = torch.arange(w.shape[0]) // 128
        cols = torch.arange(w.shape[1]) // 128
        expect = (w.float() * scale[rows][:, cols]).to(torch.bfloat16)
        assert torch.equal(t, expect), name
        # and it is the bf16 synthetic weight up to fp8 rounding
        spec = hf_tensor_specs(ck.config)[full]
        orig = synth_tensor(full, spec, seed=0).float()
        assert bool(((t.float() - orig).abs() <= 0.07 * orig.abs() + scale.max() * 2**-8).all()), name
    # MLPs of 4 layers + MTP (3 each), GDN in_proj_qkv/z/out_proj (3 layers), attention q/k/v/o (layer 3 + MTP)
    assert n_fp8 == 5 * 3 + 3 * 3 + 2 * 4
    assert "layers.0.mlp.gate_proj.weight_scale_inv" not in ck.tensor_names()
    assert "layers.0.mlp.gate_proj.weight_scale_inv" in ck.tensor_names(include_scales=True)


def test_fp8_raw_and_small_blocks_and_cast(fx, tmp_path, tiny_moe):
    ck_dir = synth(fx.moe, tmp_path / "ck", tiny_moe, fx.tokenizer, fp8=True, fused_experts=True,
                   fp8_block=(16, 32))
    ck = HFCheckpoint(ck_dir)
    assert ck.fp8_block == (16, 32)
    raw = list(ck.iter_tensors(progress=False, dequantize_fp8=False))
    names = [n for n, _ in raw]
    i = names.index("layers.0.mlp.experts.gate_up_proj")
    assert names[i + 1] == "layers.0.mlp.experts.gate_up_proj_scale_inv"
    w, s = raw[i][1], raw[i + 1][1]
    assert w.dtype == torch.float8_e4m3fn and w.shape == (8, 64, 64)
    assert s.dtype == torch.float32 and s.shape == (8, 4, 2)
    deq = dict(ck.iter_tensors(dtype=torch.float32, progress=False))
    e = 5
    expect = w[e].float() * s[e].repeat_interleave(16, 0).repeat_interleave(32, 1)
    assert deq["layers.0.mlp.experts.gate_up_proj"].dtype == torch.float32
    assert torch.equal(deq["layers.0.mlp.experts.gate_up_proj"][e], expect)
    assert deq["layers.0.input_layernorm.weight"].dtype == torch.float32  # non-fp8 floats cast too


def test_single_file_and_visual_skipped(fx, tmp_path, tiny_dense, caplog):
    ck_dir = synth(fx.dense, tmp_path / "ck", tiny_dense, fx.tokenizer)
    names = HFCheckpoint(ck_dir).tensor_names()
    # a single model.safetensors with vision tensors in it
    tensors = load_file(str(ck_dir / "model-00001-of-00001.safetensors"))
    tensors["model.visual.patch_embed.proj.weight"] = torch.zeros(8, 3, 2, 2, dtype=torch.bfloat16)
    tensors["model.visual.blocks.0.norm1.weight"] = torch.ones(8, dtype=torch.bfloat16)
    save_file(tensors, str(ck_dir / "model.safetensors"))
    (ck_dir / "model-00001-of-00001.safetensors").unlink()
    (ck_dir / "model.safetensors.index.json").unlink()
    ck = HFCheckpoint(ck_dir)
    assert sorted(ck.tensor_names()) == sorted(names)
    with caplog.at_level(logging.INFO, logger="hinfer.weights.hf_reader"):
        got = [n for n, _ in ck.iter_tensors(progress=False)]
    assert sorted(got) == sorted(names)
    skips = [r for r in caplog.records if "vision" in r.getMessage()]
    assert len(skips) == 1 and "2 vision tensors" in skips[0].getMessage()


# ---- broken checkpoints -----------------------------------------------------------------------------
@pytest.fixture
def sharded(fx, tmp_path, tiny_dense) -> Path:
    return synth(fx.dense, tmp_path / "ck", tiny_dense, fx.tokenizer, shard_bytes=60_000)


def _one_line(err: pytest.ExceptionInfo, *needles: str) -> None:
    msg = str(err.value)
    assert isinstance(err.value, HinferError) and "\n" not in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_missing_shard(sharded):
    victim = sorted(sharded.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(sharded)
    _one_line(err, victim.name, "missing")


@pytest.mark.parametrize("keep", [-10, 4, 100])
def test_truncated_shard(sharded, keep):
    victim = sorted(sharded.glob("model-*.safetensors"))[-1]
    data = victim.read_bytes()
    victim.write_bytes(data[:keep])  # cut the tail, or leave only part of the header
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(sharded)
    _one_line(err, victim.name)


def test_index_names_missing_tensor(sharded):
    index_path = sharded / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = next(iter(index["weight_map"].values()))
    index["weight_map"]["model.language_model.layers.0.linear_attn.bogus.weight"] = shard
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(sharded)
    _one_line(err, "model.safetensors.index.json", "bogus", shard)


def test_wrong_model_type(sharded):
    cfg_path = sharded / "config.json"
    raw = json.loads(cfg_path.read_text())
    raw["model_type"] = "llama"
    cfg_path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as err:
        HFCheckpoint(sharded)
    _one_line(err, str(cfg_path), "llama")


def test_no_weights(tmp_path, fx):
    (tmp_path / "config.json").write_text((fx.dense / "config.json").read_text())
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(tmp_path)
    _one_line(err, "model.safetensors")


def test_fp8_inconsistencies(fx, tmp_path, tiny_dense):
    ck_dir = synth(fx.dense, tmp_path / "ck", tiny_dense, fx.tokenizer, fp8=True)
    cfg_path = ck_dir / "config.json"
    good = cfg_path.read_text()
    # the checkpoint's own modules_to_not_convert is honoured: a listed module must not be float8
    raw = json.loads(good)
    raw["quantization_config"]["modules_to_not_convert"].append("mlp.down_proj")
    cfg_path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(ck_dir)
    _one_line(err, "config.json", "down_proj", "modules_to_not_convert")
    # no quantization_config at all
    raw = json.loads(good)
    del raw["quantization_config"]
    cfg_path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(ck_dir)
    _one_line(err, "config.json", "quantization_config")
    cfg_path.write_text(good)
    # a float8 weight without its scale
    shard = ck_dir / "model-00001-of-00001.safetensors"
    tensors = load_file(str(shard))
    del tensors["model.language_model.layers.0.mlp.up_proj.weight_scale_inv"]
    save_file(tensors, str(shard))
    index_path = ck_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    del index["weight_map"]["model.language_model.layers.0.mlp.up_proj.weight_scale_inv"]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError) as err:
        HFCheckpoint(ck_dir)
    _one_line(err, shard.name, "up_proj.weight_scale_inv")
