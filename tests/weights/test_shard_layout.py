"""Which part of each checkpoint tensor a tensor-parallel rank reads (hinfer/weights/shard_layout.py).

Over every tensor of the packaged configs, the ranks' parts cover each index of the split dim exactly once (KV
heads kept by several ranks: once per rank that keeps them; the last vocabulary block padded). Slice reads from
safetensors give the same values as cutting the whole tensor, fused and per-expert MoE layouts alike.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from hinfer.config import load_model_config
from hinfer.fixtures import config_dir
from hinfer.sharding import rank_config
from hinfer.weights.hf_layout import strip_prefix
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.inventory import inventory
from hinfer.weights.shard_layout import tensor_slice
from hinfer.weights.synth import write_synthetic_checkpoint

SPLITS = {name: (2, 4, 8) for name in ("qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b")}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_parts_cover_every_index(name):
    cfg = load_model_config(config_dir(name))
    for n in SPLITS[name]:
        local = {strip_prefix(next(t.names())): t.shape for t in inventory(rank_config(cfg, n))}
        copies = n // cfg.num_key_value_heads if cfg.num_key_value_heads < n else 1  # ranks keeping a KV head
        for t in inventory(cfg):
            key = strip_prefix(next(t.names()))
            parts = [tensor_slice(key, cfg, n, r) for r in range(n)]
            if parts[0] is None:
                assert local[key] == t.shape, key  # replicated
                continue
            dim = parts[0].dim
            seen = Counter(i for p in parts for s in p.spans for i in range(s.start, s.stop))
            want = copies if key.endswith(("k_proj.weight", "v_proj.weight")) else 1
            assert set(seen) == set(range(t.shape[dim])) and set(seen.values()) == {want}, (n, key)
            rows = sum(s.size for s in parts[0].spans)
            assert (parts[0].pad_to or rows) == local[key][dim], (n, key)  # what the rank's model holds


@pytest.fixture(scope="module")
def moe_ckpt(tmp_path_factory):
    def get(fused: bool) -> Path:
        over = dict(vocab_size=301, hidden_size=32, head_dim=16, num_attention_heads=4, num_key_value_heads=2,
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
        return write_synthetic_checkpoint(config_dir("qwen3.6-35b-a3b"), tmp_path_factory.mktemp(f"moe{fused}"),
                                          layers=4, fused_experts=fused, overrides=over, progress=False)  # fmt: skip

    return get


@pytest.mark.parametrize("fused", [False, True])
def test_slice_reads_equal_cut_tensors(moe_ckpt, fused):
    ck = HFCheckpoint(moe_ckpt(fused))
    cfg = ck.config
    whole = dict(ck.iter_tensors(torch.float32, progress=False))
    for rank in range(2):
        parts = dict(ck.iter_slices(lambda name, r=rank: tensor_slice(name, cfg, 2, r), torch.float32,
                                    skip=lambda name: name.startswith("mtp.")))  # fmt: skip
        assert set(parts) == {n for n in whole if not n.startswith("mtp.")}
        for name, part in parts.items():
            s = tensor_slice(name, cfg, 2, rank)
            if s is None:
                assert torch.equal(part, whole[name]), name
                continue
            cut = torch.cat([whole[name].narrow(s.dim, p.start, p.size) for p in s.spans], dim=s.dim)
            assert torch.equal(part.narrow(s.dim, 0, cut.shape[s.dim]), cut), name
            assert not part.narrow(s.dim, cut.shape[s.dim], part.shape[s.dim] - cut.shape[s.dim]).any()  # padding


@pytest.mark.parametrize("fmt", ["fp8", "int4-sym", "int4-asym"])
def test_quantized_slice_reads_equal_cut_dequantized_tensors(tmp_path, fmt, monkeypatch):
    """Official block FP8 and compressed-tensors int4 checkpoints: a rank's part read from the stored rows / columns
    it covers (weights, scales, zero points) dequantizes to the cut of the whole dequantized tensor, bit for bit;
    parts on the format's boundaries (the MLP's 128-row halves) never read the whole tensor, parts off them (a
    64-row KV head against 128-row fp8 blocks) do."""
    from test_quantized_checkpoints import _synth, write_ct

    if fmt == "fp8":
        path = _synth(tmp_path / "fp8", False, fp8=True)
    else:
        path, _ = write_ct(_synth(tmp_path / "bf16", False), tmp_path / "ct", symmetric=fmt == "int4-sym",
                           ignore=["lm_head"])  # fmt: skip
    ck = HFCheckpoint(path)
    cfg = ck.config
    whole = dict(ck.iter_tensors(torch.float32, progress=False))
    read_whole: list[str] = []
    real = HFCheckpoint.read_tensors
    monkeypatch.setattr(HFCheckpoint, "read_tensors",
                        lambda self, names, dtype=torch.bfloat16: read_whole.extend(names) or real(self, names, dtype))
    for rank in range(2):
        parts = dict(ck.iter_slices(lambda name, r=rank: tensor_slice(name, cfg, 2, r), torch.float32,
                                    skip=lambda name: name.startswith("mtp.")))  # fmt: skip
        for name, part in parts.items():
            s = tensor_slice(name, cfg, 2, rank)
            cut = whole[name] if s is None else torch.cat([whole[name].narrow(s.dim, p.start, p.size)
                                                            for p in s.spans], dim=s.dim)  # fmt: skip
            assert torch.equal(part.narrow(s.dim, 0, cut.shape[s.dim]) if s else part, cut), name
    mlp = [n for n in whole if ".mlp." in n and n.endswith("proj.weight")]
    assert mlp and not set(mlp) & set(read_whole)
    if fmt == "fp8":
        assert any(n.endswith("k_proj.weight") for n in read_whole)
