"""`hinfer bench --prefix-ttft` end to end on the CPU at a tiny size: turn 2 of a conversation takes the history
from the cache on the device and, after a spill, from host RAM (one checkpoint and every history page restored),
the cache-off core computes everything, decode lanes run on both cores, and the JSON and table land. Timings
mean nothing here."""

from __future__ import annotations

import json

import torch

from hinfer.bench.prefix_ttft import PrefixTtftSpec, run_prefix_ttft
from hinfer.bench.prefix_ttft_report import ttft_table
from hinfer.config import EngineConfig


def test_prefix_ttft_bench_runs_on_cpu(tmp_path, tiny_model):
    torch.set_num_threads(1)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(tiny_model[0].extra["raw"]))  # tests/conftest.py's tiny model
    spec = PrefixTtftSpec(model=str(tmp_path / "m"), history_tokens=100, new_tokens=12, repeats=2,
                          concurrency=[1, 2], decode_prompt=20, decode_steps=2, out_dir=tmp_path / "out",
                          command="hinfer bench --prefix-ttft 100")  # fmt: skip
    result = run_prefix_ttft(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=64))
    ttft = result["ttft"]
    assert list(ttft) == ["cold", "gpu", "host", "off"]
    assert ttft["cold"]["prompt_tokens"] == 100 and ttft["off"]["prompt_tokens"] == ttft["gpu"]["prompt_tokens"] == 112
    assert ttft["gpu"]["cached_tokens"] == ttft["host"]["cached_tokens"] == [96, 96]  # 100 aligned down to a page
    assert ttft["cold"]["cached_tokens"] == ttft["off"]["cached_tokens"] == [0, 0]
    assert ttft["gpu"]["host_checkpoint_restores"] == ttft["gpu"]["host_kv_page_restores"] == [0, 0]
    assert ttft["host"]["host_checkpoint_restores"] == [1, 1] and ttft["host"]["host_kv_page_restores"] == [6, 6]
    assert all(len(t["ttft_s"]) == 2 and 0 < t["ttft_min_s"] <= t["ttft_median_s"] <= t["ttft_max_s"]
               for t in ttft.values())  # fmt: skip
    assert all(result["checks"].values()) and len(result["checks"]) == 5
    assert ttft["gpu"]["first_tokens_equal_to_off"] == 1.0
    assert [d["lanes"] for d in result["decode"]] == [1, 2]
    assert all(len(d["on_windows_tok_s"]) == len(d["off_windows_tok_s"]) == 2 and d["on_over_off"] > 0
               for d in result["decode"])  # fmt: skip
    meta = result["meta"]
    assert meta["kind"] == "prefix_ttft" and meta["gpu"] == "cpu" and meta["commit"]
    assert meta["command"] == "hinfer bench --prefix-ttft 100" and meta["workload"]["new_tokens"] == 12
    assert meta["engine"]["on"]["checkpoint_slots"] == 4 and meta["engine"]["off"]["checkpoint_slots"] == 0
    assert meta["engine"]["on"]["host_kv_pages"] >= 7 and meta["engine"]["on"]["host_checkpoints"] > 0
    out = list((tmp_path / "out").glob("*-prefix-ttft-m-bf16.json"))
    assert len(out) == 1 and json.loads(out[0].read_text())["ttft"]["host"]["cached_tokens"] == [96, 96]
    table = ttft_table(result)
    assert "| turn 2 from host RAM | 112 | 96 |" in table and "| 2 |" in table and "checks: all passed" in table and "in 100% of repeats" in table


def test_cli_flags():
    from hinfer.cli.main import build_parser

    args = build_parser().parse_args(["bench", "qwen3.6-27b", "--prefix-ttft", "32K", "--repeats", "3"])
    assert (args.prefix_ttft, args.new_tokens, args.repeats, args.decode_prompt) == (32768, 200, 3, 1000)
    assert build_parser().parse_args(["bench", "x"]).prefix_ttft is None
