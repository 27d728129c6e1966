"""`hinfer synth` through the CLI dispatcher."""

from __future__ import annotations

import pytest
import torch

from hinfer.cli.commands.synth import parse_overrides, parse_size
from hinfer.cli.main import build_parser, main
from hinfer.errors import ConfigError
from hinfer.weights.hf_reader import HFCheckpoint

TINY_ARGS = ["--override", "hidden_size=64", "--override", "num_attention_heads=2", "--override",
             "num_key_value_heads=1", "--override", "head_dim=32", "--override", "linear_num_key_heads=2",
             "--override", "linear_num_value_heads=4", "--override", "linear_key_head_dim=16", "--override",
             "linear_value_head_dim=16", "--override", "vocab_size=512"]


def test_cli_synth_dense(fx, tmp_path):
    out = tmp_path / "ck"
    rc = main(["synth", "--config", str(fx.dense), "--out", str(out), "--layers", "2", "--seed", "3",
               "--shard-size", "100KB", "--tokenizer", str(fx.tokenizer), *TINY_ARGS,
               "--override", "intermediate_size=128"])
    assert rc == 0
    ck = HFCheckpoint(out)
    assert ck.config.layer_types == ("linear_attention", "full_attention")
    assert ck.config.hidden_size == 64 and len(list(out.glob("model-*.safetensors"))) > 1


def test_cli_synth_vision_fp8(fx, tmp_path):
    out = tmp_path / "ck"
    rc = main(["synth", "--config", str(fx.dense), "--out", str(out), "--layers", "1", "--fp8", "--vision",
               "--tokenizer", str(fx.tokenizer), *TINY_ARGS, "--override", "intermediate_size=128",
               "--vision-override", "depth=1", "--vision-override", "hidden_size=32", "--vision-override",
               "intermediate_size=48", "--vision-override", "num_heads=2", "--vision-override", "out_hidden_size=64"])
    assert rc == 0
    ck = HFCheckpoint(out)
    visual = dict(ck.iter_visual())
    assert ck.has_visual and ck.config.vision is not None and ck.config.vision.depth == 1
    assert visual["blocks.0.attn.qkv.weight"].shape == (96, 32) and len(visual) == 21
    assert all(t.dtype == torch.bfloat16 for t in visual.values())  # the tower is never fp8
    assert ck.is_fp8


def test_cli_synth_moe_fp8_fused(fx, tmp_path):
    out = tmp_path / "ck"
    rc = main(["synth", "--config", str(fx.moe / "config.json"), "--out", str(out), "--layers", "4", "--fp8",
               "--fused-experts", "--tokenizer", str(fx.tokenizer), *TINY_ARGS, "--override", "num_experts=4",
               "--override", "moe_intermediate_size=32", "--override", "shared_expert_intermediate_size=32"])
    assert rc == 0
    ck = HFCheckpoint(out)
    assert ck.is_fp8 and ck.quantization["weight_block_size"] == [128, 128]
    assert "layers.0.mlp.experts.gate_up_proj" in ck.tensor_names()


def test_cli_synth_packaged_name(tmp_path, monkeypatch):
    monkeypatch.delenv("HINFER_FIXTURES", raising=False)
    out = tmp_path / "ck"
    assert main(["synth", "--config", "qwen3.5-0.8b", "--out", str(out), "--layers", "1", *TINY_ARGS,
                 "--override", "intermediate_size=128"]) == 0
    ck = HFCheckpoint(out)
    assert ck.config.tie_word_embeddings and ck.config.layer_types == ("full_attention",)
    assert (out / "tokenizer.json").is_file()


def test_cli_errors_are_one_line(fx, tmp_path, capsys):
    rc = main(["synth", "--config", str(fx.dense), "--out", str(tmp_path / "x"), "--shard-size", "lots"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --shard-size") and err.count("\n") == 1
    rc = main(["synth", "--config", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert rc == 1 and "config.json" in capsys.readouterr().err


def test_help_and_parsers():
    sub = build_parser()._subparsers._group_actions[0].choices["synth"]
    text = sub.format_help()
    for flag in ("--config", "--out", "--layers", "--fp8", "--fused-experts", "--seed", "--shard-size",
                 "--override", "--tokenizer"):
        assert flag in text
    assert parse_size("2GB") == 2 * 10**9 and parse_size("2GiB") == 2 * 2**30 and parse_size("1234") == 1234
    assert parse_size("1.5 MiB") == 3 * 2**19
    assert parse_overrides(["a=1", "b=[1, 2]", "c=text", "d=true"]) == {"a": 1, "b": [1, 2], "c": "text", "d": True}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])
