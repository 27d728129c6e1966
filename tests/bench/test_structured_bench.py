"""`hinfer bench --structured` end to end on the CPU at a tiny size: unconstrained, every lane and half the lanes
constrained by the bench's JSON schema; every lane makes every token, each constrained token is masked and fed
to its grammar, the JSON and table land. Timings mean nothing here."""

from __future__ import annotations

import json

import jsonschema
import torch

from hinfer.bench.structured import StructuredSpec, run_structured
from hinfer.bench.structured_report import structured_table
from hinfer.bench.structured_schema import report_schema
from hinfer.config import EngineConfig


def test_structured_bench_runs_on_cpu(tmp_path, tiny_model):
    torch.set_num_threads(1)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(tiny_model[0].extra["raw"]))  # tests/conftest.py's tiny model
    spec = StructuredSpec(model=str(tmp_path / "m"), lanes=[2], prompt_tokens=12, steps=3, repeats=1,
                          out_dir=tmp_path / "out", command="hinfer bench m --structured")  # fmt: skip
    # a step's 16 prompt tokens: the first lane is through its prefill a step before the second and decodes
    # meanwhile, so its total is a token ahead; each window's count is the same for both
    result = run_structured(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=16))
    rows = result["rows"]
    assert [(r["mode"], r["constrained_lanes"]) for r in rows] == [("free", 0), ("json", 2), ("mixed", 1)]
    assert all(r["tokens_per_request"] == [4 + 3] for r in rows)  # in each window: 4 untimed, 3 timed
    assert [r["grammar_masks"] for r in rows] == [0, 2 * 7, 7] == [r["grammar_accepted"] for r in rows]
    assert all(r["tok_s"] > 0 and len(r["windows_tok_s"]) == 1 for r in rows) and rows[0]["vs_free"] == 1.0
    json_row = rows[1]["grammar_host_ms_per_step"]
    assert json_row["fill"] > 0 and json_row["total"] >= json_row["fill"] + json_row["accept"]
    assert rows[0]["grammar_host_ms_per_step"]["total"] == 0
    assert all(result["checks"].values()) and len(result["checks"]) == 4
    assert result["sample"].startswith("{") and '"' in result["sample"]  # 8 tokens: the answer's start
    assert result["schema"]["properties"]["items"]["minItems"] == spec.max_tokens
    meta = result["meta"]
    assert meta["kind"] == "structured" and meta["gpu"] == "cpu" and meta["commit"]
    assert meta["command"] == "hinfer bench m --structured" and meta["tokens_per_request"] == 7
    out = list((tmp_path / "out").glob("*-structured-m-bf16.json"))
    assert len(out) == 1 and json.loads(out[0].read_text())["rows"][1]["mode"] == "json"
    table = structured_table(result)
    assert "| 2 | every lane a JSON schema | 2 |" in table and "| 2 | unconstrained | 0 |" in table
    assert "checks: all passed" in table and f'"minItems": {spec.max_tokens}' in table and "at 2 lanes" in table


def test_schema_takes_a_long_valid_answer():
    schema = report_schema(min_items=2)
    jsonschema.Draft202012Validator.check_schema(schema)
    item = {"sku": "A1", "name": "saw", "category": "tools", "quantity": 3, "unit_price": 9.5, "in_stock": True,
            "tags": ["steel"], "dimensions": {"width_cm": 1, "height_cm": 2.5, "depth_cm": 30}}
    answer = {"report_id": "r1", "status": "final", "customer": {"name": "Ann", "tier": "pro"}, "items": [item] * 2}
    jsonschema.validate(answer, schema)
    short = answer | {"items": [item]}
    assert not jsonschema.Draft202012Validator(schema).is_valid(short)  # minItems holds the answer open


def test_cli_defaults():
    from hinfer.cli.commands.bench import fill_defaults
    from hinfer.cli.main import build_parser

    args = build_parser().parse_args(["bench", "qwen3.6-27b", "--structured"])
    fill_defaults(args)
    assert (args.structured, args.concurrency, args.steps, args.repeats, args.decode_prompt) == (True, [8], 256, 3, 1000)
    args = build_parser().parse_args(["bench", "x", "--structured", "--concurrency", "4,8", "--steps", "32"])
    fill_defaults(args)
    assert (args.concurrency, args.steps, args.repeats) == ([4, 8], 32, 3)
    args = build_parser().parse_args(["bench", "x"])
    fill_defaults(args)
    assert (args.structured, args.concurrency, args.steps, args.repeats) == (False, [1, 2, 4, 8], 64, 5)
