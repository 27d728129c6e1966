"""The command line: help for every command, the demo end to end, one-line errors for bad checkpoints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hinfer.cli.main import build_parser, main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("serve", "generate", "bench", "plan", "synth"):
        assert cmd in out
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, p in sub.items():
        text = p.format_help()
        assert text.strip(), name
        for action in p._actions:  # every flag explains itself
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings} has no help"


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory, fixtures_dir) -> Path:
    from hinfer.weights.synth import write_synthetic_checkpoint

    out = tmp_path_factory.mktemp("ckpt")
    write_synthetic_checkpoint(
        fixtures_dir / "qwen3.5-0.8b", out, layers=2, progress=False,
        overrides={"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                   "head_dim": 16, "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
                   "linear_value_head_dim": 8, "vocab_size": 248320, "max_position_embeddings": 512},
    )  # fmt: skip
    return out


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hinfer", *args], capture_output=True, text=True, timeout=300)


def test_generate_on_a_checkpoint(tiny_ckpt):
    r = run_cli("generate", "--model", str(tiny_ckpt), "--prompt", "Hello", "--max-tokens", "3", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "3 tokens" in r.stderr


def test_batch_on_a_checkpoint(tiny_ckpt, tmp_path):
    """`hinfer batch`: two requests through the server's routes in process, answered in order; a line that is no
    request makes the exit status 1."""
    lines = [{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": tiny_ckpt.name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}},
             {"custom_id": "b", "method": "POST", "url": "/v1/completions",
              "body": {"model": tiny_ckpt.name, "prompt": "Hello", "max_tokens": 2}}]  # fmt: skip
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    r = run_cli("batch", str(src), str(out), "--model", str(tiny_ckpt), "--device", "cpu")
    assert r.returncode == 0, r.stderr
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [g["custom_id"] for g in got] == ["a", "b"] and all(g["response"]["status_code"] == 200 for g in got)
    assert got[0]["response"]["body"]["usage"]["completion_tokens"] == 3 and "2 requests in" in r.stderr
    src.write_text(json.dumps(lines[0]) + "\n{oops\n")
    r = run_cli("batch", str(src), str(out), "--model", str(tiny_ckpt), "--device", "cpu")
    assert r.returncode == 1 and "1 answered 200, 1 not" in r.stderr


def _broken(tmp_path: Path, src: Path, how: str) -> Path:
    d = tmp_path / how
    shutil.copytree(src, d)
    shards = sorted(d.glob("model-*.safetensors"))
    if how == "model_type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model_type"] = "llama"
        (d / "config.json").write_text(json.dumps(cfg))
    elif how == "missing_shard":
        shards[0].unlink()
    elif how == "truncated":
        data = shards[0].read_bytes()
        shards[0].write_bytes(data[: len(data) // 2])
    elif how == "template":
        (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    return d


@pytest.mark.parametrize(
    "how,needle",
    [("model_type", "model_type"), ("missing_shard", "safetensors"), ("truncated", "safetensors"),
     ("template", "template")],
)  # fmt: skip
def test_bad_checkpoints_give_one_line_errors(tmp_path, tiny_ckpt, how, needle):
    d = _broken(tmp_path, tiny_ckpt, how)
    r = run_cli("generate", "--model", str(d), "--prompt", "Hello", "--max-tokens", "2", "--device", "cpu")
    assert r.returncode != 0
    err = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(err) == 1 and needle in err[0].lower(), r.stderr
    assert "Traceback" not in r.stderr


def test_serve_refuses_a_plan_that_does_not_fit_before_loading(tiny_ckpt):
    import time

    t0 = time.monotonic()
    r = run_cli("serve", str(tiny_ckpt), "--device", "cpu", "--gpu-memory", "1MB", "--port", "1")
    assert r.returncode == 1
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert err and "1,000,000" in r.stderr and "loaded" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_chat_two_turns_on_the_demo(tmp_path):
    import os

    from PIL import Image

    env = os.environ | {"HINFER_CACHE": str(tmp_path)}
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "a.png")
    talk = f"hi\n/image {tmp_path / 'a.png'}\nlook\nmore\n/quit\n"  # the demo's small vision tower reads it
    r = subprocess.run([sys.executable, "-m", "hinfer", "chat", "--max-tokens", "4", "--show-thinking", "--device",
                        "cpu"], input=talk, capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(">") >= 4
    assert "error:" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("flags", "want"),
    [([], "bf16"), (["--quant", "fp8"], "fp8"), (["--weights", "int4"], "int4"), (["--weights", "auto"], "bf16"),
     (["--quant", "int4", "--weights", "int4"], "int4")],
)  # fmt: skip
def test_bench_reads_weights_and_quant_alike(flags, want):
    from hinfer.cli.commands.bench import bench_weights

    assert bench_weights(build_parser().parse_args(["bench", "qwen3.6-27b", *flags])) == want


def test_bench_refuses_quant_and_weights_that_disagree(capsys):
    assert main(["bench", "qwen3.6-27b", "--quant", "fp8", "--weights", "int4"]) == 1
    assert "--quant fp8 and --weights int4 disagree" in capsys.readouterr().err
