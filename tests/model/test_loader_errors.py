"""model/loader.py rejects a checkpoint that does not fit the config with a one-line CheckpointError naming
the offending tensor: wrong shape, unexpected name, missing tensor, duplicate.

Also: expert tensors out of range or in layers without experts, and each later part of a fused group named
exactly when it is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import hinfer
from hinfer.config import load_model_config
from hinfer.errors import CheckpointError
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.synth import write_synthetic_checkpoint

CONFIGS = Path(hinfer.__file__).parent / "configs"
_SMALL = dict(
    vocab_size=256, hidden_size=32, head_dim=16, num_attention_heads=2, num_key_value_heads=1,
    linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
)  # fmt: skip
VARIANTS = {
    "dense": ("qwen3.5-0.8b", _SMALL | {"intermediate_size": 48}),  # tied, with an MTP head
    "moe": ("qwen3.6-35b-a3b", _SMALL | dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                             shared_expert_intermediate_size=16)),  # untied, MTP head
}  # fmt: skip


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    cache: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in cache:
            src, over = VARIANTS[variant]
            cache[variant] = write_synthetic_checkpoint(
                CONFIGS / src, tmp_path_factory.mktemp(variant), layers=4, dtype=torch.float32,
                overrides=over, progress=False,
            )  # fmt: skip
        return cache[variant]

    return get


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return dict(HFCheckpoint(path).iter_tensors(progress=False))


def _load(path: Path, tensors: dict[str, torch.Tensor] | list[tuple[str, torch.Tensor]]) -> None:
    model = Qwen35ForCausalLM(load_model_config(path), dtype=torch.float32)
    items = tensors.items() if isinstance(tensors, dict) else tensors
    load_weights(model, items, source=str(path))


def _expect_error(path: Path, tensors, name: str, *words: str) -> str:
    with pytest.raises(CheckpointError) as info:
        _load(path, tensors)
    msg = str(info.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    assert f"'{name}'" in msg or name in msg, f"message does not name {name}: {msg}"
    for w in words:
        assert w in msg, f"{w!r} missing from: {msg}"
    return msg


def test_clean_checkpoint_loads(ckpt: Callable[[str], Path]) -> None:
    for v in VARIANTS:
        _load(ckpt(v), _tensors(ckpt(v)))


# ---- wrong shape ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variant,name",
    [
        ("dense", "norm.weight"),
        ("dense", "layers.0.linear_attn.in_proj_z.weight"),  # one part of a fused parameter
        ("dense", "layers.3.self_attn.k_proj.weight"),
        ("dense", "layers.0.linear_attn.conv1d.weight"),
        ("dense", "mtp.fc.weight"),
        ("moe", "layers.1.mlp.experts.2.down_proj.weight"),
        ("moe", "layers.1.mlp.gate.weight"),
    ],
)
def test_wrong_shape(ckpt: Callable[[str], Path], variant: str, name: str) -> None:
    path = ckpt(variant)
    ts = _tensors(path)
    bad = ts[name][..., :-1].contiguous()  # one column short
    ts[name] = bad
    _expect_error(path, ts, name, "shape", str(list(bad.shape)))


def test_wrong_shape_in_file(ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    """The same through the reader: a shard on disk holding a tensor of the wrong shape."""
    path = _copy_ckpt(ckpt("moe"), tmp_path / "bad")
    full = "model.language_model.layers.2.linear_attn.out_proj.weight"
    _edit_shard(path, full, lambda t: t[:-1].contiguous())
    _expect_error(path, _tensors(path), "layers.2.linear_attn.out_proj.weight", "shape")


# ---- unexpected names ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variant,name",
    [
        ("dense", "layers.0.mlp.bogus_proj.weight"),
        ("dense", "layers.7.input_layernorm.weight"),  # a layer the config does not have
        ("dense", "layers.0.self_attn.q_proj.weight"),  # attention weights on a GDN layer
        ("moe", "layers.0.mlp.experts.0.bogus_proj.weight"),
        ("moe", "mtp.layers.1.input_layernorm.weight"),  # a second MTP layer
    ],
)
def test_unexpected_tensor(ckpt: Callable[[str], Path], variant: str, name: str) -> None:
    path = ckpt(variant)
    ts = _tensors(path)
    ts[name] = torch.zeros(4)
    _expect_error(path, ts, name, "unexpected")


def test_expert_index_out_of_range(ckpt: Callable[[str], Path]) -> None:
    path = ckpt("moe")
    ts = _tensors(path)
    ts["layers.0.mlp.experts.4.up_proj.weight"] = torch.zeros(16, 32)  # 4 experts: ids 0..3
    _expect_error(path, ts, "layers.0.mlp.experts.4.up_proj.weight")


def test_expert_tensor_in_dense_model(ckpt: Callable[[str], Path]) -> None:
    path = ckpt("dense")
    ts = _tensors(path)
    ts["layers.0.mlp.experts.0.up_proj.weight"] = torch.zeros(48, 32)
    _expect_error(path, ts, "layers.0.mlp.experts.0.up_proj.weight")


def test_expert_tensor_in_missing_layer(ckpt: Callable[[str], Path]) -> None:
    path = ckpt("moe")
    ts = _tensors(path)
    ts["layers.9.mlp.experts.0.up_proj.weight"] = torch.zeros(16, 32)
    _expect_error(path, ts, "layers.9.mlp.experts.0.up_proj.weight")


# ---- missing / duplicate -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "variant,name",
    [
        ("dense", "norm.weight"),
        ("dense", "layers.0.linear_attn.A_log"),
        ("dense", "embed_tokens.weight"),  # tied: also the head
        ("dense", "mtp.pre_fc_norm_hidden.weight"),
        ("moe", "lm_head.weight"),
        ("moe", "layers.3.self_attn.o_proj.weight"),
        ("moe", "layers.2.mlp.shared_expert_gate.weight"),
        # the first part of a fused group is named correctly (the hint is the group's first name)
        ("dense", "layers.0.linear_attn.in_proj_qkv.weight"),
        ("dense", "layers.3.self_attn.q_proj.weight"),
    ],
)
def test_missing_tensor(ckpt: Callable[[str], Path], variant: str, name: str) -> None:
    path = ckpt(variant)
    ts = _tensors(path)
    del ts[name]
    _expect_error(path, ts, name, "missing")


@pytest.mark.parametrize(
    "variant,name",
    [
        ("dense", "layers.0.linear_attn.in_proj_z.weight"),  # named as in_proj_qkv
        ("dense", "layers.3.self_attn.v_proj.weight"),  # named as q_proj
        ("dense", "layers.1.mlp.up_proj.weight"),  # named as gate_proj
        ("moe", "layers.1.mlp.experts.3.up_proj.weight"),  # named as experts.gate_up_proj
    ],
)
def test_missing_fused_part(ckpt: Callable[[str], Path], variant: str, name: str) -> None:
    path = ckpt(variant)
    ts = _tensors(path)
    del ts[name]
    _expect_error(path, ts, name, "missing")


def test_missing_in_file(ckpt: Callable[[str], Path], tmp_path: Path) -> None:
    """Through the reader: a tensor absent from both the shard and the index."""
    path = _copy_ckpt(ckpt("dense"), tmp_path / "bad")
    full = "model.language_model.layers.1.post_attention_layernorm.weight"
    _edit_shard(path, full, None)
    _expect_error(path, _tensors(path), "layers.1.post_attention_layernorm.weight", "missing")


def test_duplicate_tensor(ckpt: Callable[[str], Path]) -> None:
    path = ckpt("dense")
    items = list(_tensors(path).items())
    items.append(next((n, t) for n, t in items if n == "layers.2.input_layernorm.weight"))
    _expect_error(path, items, "layers.2.input_layernorm.weight", "twice")


def test_tied_checkpoint_may_store_lm_head(ckpt: Callable[[str], Path]) -> None:
    """Some writers store the (identical) head of a tied model: accepted and ignored."""
    path = ckpt("dense")
    ts = _tensors(path)
    ts["lm_head.weight"] = ts["embed_tokens.weight"].clone()
    _load(path, ts)


# ---- helpers ----------------------------------------------------------------------------------------------
def _copy_ckpt(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _edit_shard(path: Path, name: str, fn: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
    """Rewrite the shard holding `name` with fn(tensor), or without it (and out of the index) when fn is None."""
    index_path = path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = path / index["weight_map"][name]
    tensors = load_file(str(shard))
    if fn is None:
        del tensors[name], index["weight_map"][name]
        index_path.write_text(json.dumps(index))
    else:
        tensors[name] = fn(tensors[name])
    save_file(tensors, str(shard), metadata={"format": "pt"})
