"""`hinfer bench --spec-serving` end to end on the CPU with the demo model: two real `hinfer serve` processes
(plain, then --spec mtp), a streaming load at 1 and 2 clients, both servers' figures in the JSON, and the same
greedy answers from both (speculation must not change greedy output). Timings mean nothing here."""

from __future__ import annotations

import json

from hinfer.bench.spec_serving import (
    MODEL_NAME,
    NEAR_TIE,
    SpecServingSpec,
    first_difference,
    near_tie,
    run_spec_serving,
    serve_flags,
)
from hinfer.bench.spec_serving_report import spec_serving_table
from hinfer.bench.stream_load import parse_metrics
from hinfer.config import EngineConfig


def test_spec_serving_runs_on_cpu_with_the_demo_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HINFER_CACHE", str(tmp_path / "cache"))  # the servers inherit it: one demo checkpoint
    spec = SpecServingSpec(model="demo", clients=[1, 2], request_tokens=12, warmup_s=0.5, window_s=1.5,
                           out_dir=tmp_path / "out", command="hinfer bench demo --spec-serving")  # fmt: skip
    result = run_spec_serving(spec, EngineConfig(device="cpu"))
    plain, spec_run = result["servers"]
    assert [s["server"] for s in result["servers"]] == ["plain", "spec"]
    assert "--spec" not in plain["flags"]
    assert spec_run["flags"][-5:] == ["--spec", "mtp", "--draft-tokens", "3", "--spec-adaptive"]
    for server in (plain, spec_run):
        assert [p["clients"] for p in server["phases"]] == [1, 2]
        assert all(p["tok_s"] > 0 and p["client_errors"] == 0 for p in server["phases"])
        assert server["exit_code"] == 0
    assert all("spec" not in p for p in plain["phases"])
    assert all(p["spec"]["verify_steps"] + p["spec"]["plain_steps"] > 0 for p in spec_run["phases"])
    assert [(r["clients"], r["plain_tok_s"] > 0, r["spec_tok_s"] > 0) for r in result["ratios"]] == [
        (1, True, True), (2, True, True)]  # fmt: skip
    # the correctness half: the same greedy answers, and the spec server really drafted while making them
    texts = [[g["text"] for g in s["greedy"]] for s in result["servers"]]
    assert texts[0] == texts[1] and all(texts[0]) and result["greedy_first_difference"] == [None, None]
    assert result["greedy_parting"] == [None, None] and all(len(g["tokens"]) == 12 for g in spec_run["greedy"])
    assert all(g["usage"]["completion_tokens"] == 12 for s in result["servers"] for g in s["greedy"])
    assert all(result["checks"].values()), result["checks"]
    assert result["meta"]["kind"] == "spec_serving" and result["meta"]["target_ratio"] == 0.95
    out = list((tmp_path / "out").glob("*-spec-serving-demo-bf16.json"))
    assert len(out) == 1 and json.loads(out[0].read_text())["ratios"] == result["ratios"]
    assert (tmp_path / "out" / "spec-serving-spec.log").read_text().count("--spec mtp") == 1
    table = spec_serving_table(result)
    assert "| 1 | " in table and "| 2 | " in table
    assert "greedy answers identical on both servers: 2 of 2" in table
    assert "checks: all passed" in table


def test_both_servers_get_the_same_engine_flags():
    spec = SpecServingSpec(model="demo", clients=[1, 8], request_tokens=256)
    ecfg = EngineConfig(device="cuda", draft_tokens=4, spec_adaptive=True, spec_draft_cost=0.2)
    plain, spec_flags = serve_flags(ecfg, spec, False), serve_flags(ecfg, spec, True)
    assert spec_flags[: len(plain)] == plain
    assert spec_flags[len(plain):] == ["--spec", "mtp", "--draft-tokens", "4", "--spec-adaptive",
                                       "--spec-draft-cost", "0.2"]  # fmt: skip
    pairs = dict(zip(plain, plain[1:]))
    assert pairs["--max-concurrency"] == "8" and pairs["--max-context"] == "4096"
    assert pairs["--served-model-name"] == MODEL_NAME and "--no-prefix-cache" in plain
    long = SpecServingSpec(model="demo", request_tokens=8000, max_context=None)
    flags = serve_flags(ecfg, long, False)
    assert flags[flags.index("--max-context") + 1] == "9024"  # long answers get room


def test_first_difference_and_metrics_parsing():
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") == 2 and first_difference("ab", "abc") == 2
    text = ('# TYPE hinfer_engine_tokens_generated_total counter\n'
            'hinfer_engine_tokens_generated_total{model="bench"} 123\n'
            'hinfer_requests_total{model="bench",endpoint="/v1/chat/completions",status="200"} 4\n'
            'hinfer_engine_spec_cost_b1_k1{model="bench"} 1.25\n')  # fmt: skip
    assert parse_metrics(text) == {"hinfer_engine_tokens_generated_total": 123.0,
                                   "hinfer_engine_spec_cost_b1_k1": 1.25}  # fmt: skip


def test_cli_defaults_to_one_and_eight_clients():
    from hinfer.cli.commands.bench import fill_defaults
    from hinfer.cli.main import build_parser

    args = build_parser().parse_args(["bench", "qwen3.6-27b", "--spec-serving", "--layers", "16"])
    fill_defaults(args)
    assert args.concurrency == [1, 8] and args.request_tokens == 256
    assert args.window == 20 and args.warmup == 10
    args = build_parser().parse_args(["bench", "qwen3.6-27b", "--spec-serving", "--concurrency", "2"])
    fill_defaults(args)
    assert args.concurrency == [2]


def test_greedy_answers_may_part_only_at_a_near_tie():
    """Where the answers part, the speculative server's token must be among the plain server's top choices within
    NEAR_TIE nats of its first (bf16 rounding of a verify step's rows); anything else is a failed check."""
    plain = {"tokens": ["a", "b", "c"], "top": [{"a": -0.1, "x": -3.0}, {"b": -0.6, "d": -0.8}, {"c": -0.1}]}
    assert near_tie(plain, dict(plain)) is None
    close = near_tie(plain, {"tokens": ["a", "d", "e"]})
    assert close["token"] == 1 and abs(close["gap"] - 0.2) < 1e-9 and close["near_tie"]
    far = {"tokens": ["x", "b", "c"]}  # the second choice, but 2.9 nats below the first
    assert near_tie(plain, far)["gap"] > NEAR_TIE and not near_tie(plain, far)["near_tie"]
    assert near_tie(plain, {"tokens": ["a", "q"]}) == {"token": 1, "gap": None, "near_tie": False}  # not among its top choices
