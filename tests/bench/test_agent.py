"""`hinfer bench --agent` end to end on the CPU at a tiny size: conversations grow turn by turn through the real
EngineCore with the prefix cache on and off, the cache takes most of the history (from host rows when the device
keeps one checkpoint), greedy answers do not change, and the JSON and table land. Timings mean nothing here."""

from __future__ import annotations

import json

import torch

from hinfer.bench.agent import AgentSpec, agent_table, percentile, run_agent_bench
from hinfer.bench.agent_workload import AgentWorkload, longest_conversation
from hinfer.config import EngineConfig
from hinfer.engine.memory_plan import gdn_slot_bytes


def test_workload_grows_toward_the_target():
    w = AgentWorkload(conversations=3, turns=5, target_context=2000, user_tokens=(50, 150), answer_tokens=20)
    assert w.opening_tokens == 2000 - 5 * (100 + 20)
    msgs = w.messages(vocab=1024)
    assert msgs == w.messages(vocab=1024) and len(msgs) == 3 and all(len(c) == 5 for c in msgs)
    assert all(50 <= len(m) <= 150 for c in msgs for m in c[1:]) and len(msgs[0][0]) >= w.opening_tokens + 50
    assert all(0 < t < 1024 for c in msgs for m in c for t in m)
    assert 1600 < longest_conversation(msgs, 20) <= 2000
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile([1.0, 2.0], 0.9) == 1.9


def test_agent_bench_runs_on_cpu(tmp_path, tiny_model):
    cfg, _ = tiny_model  # tests/conftest.py: the engine tests' tiny dense model (a fixture, so no conftest import)
    torch.set_num_threads(1)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg.extra["raw"]))
    slot = gdn_slot_bytes(cfg, "fp32")
    w = AgentWorkload(conversations=2, turns=4, target_context=480, user_tokens=(20, 60), answer_tokens=8)
    spec = AgentSpec(model=str(tmp_path / "m"), workload=w, out_dir=tmp_path / "out", command="hinfer bench --agent")
    ecfg = EngineConfig(device="cpu", page_size=16, prefill_chunk=64, prefix_cache_slots=1, host_cache_bytes=16 * slot)
    result = run_agent_bench(spec, ecfg)
    on, off = result["runs"]["on"], result["runs"]["off"]
    assert on["turns"] == off["turns"] == 8 and on["prompt_tokens"] == off["prompt_tokens"]
    assert off["cached_tokens"] == 0 and on["cached_tokens"] > 0
    later = [t for t in result["turns"]["on"] if t["turn"] > 0]  # the first turn has nothing to resume from
    assert sum(t["cached_tokens"] for t in later) > 0.8 * sum(t["prompt_tokens"] for t in later)
    assert on["computed_tokens"] + on["cached_tokens"] == on["prompt_tokens"] and on["host_restores"] > 0
    assert on["answers_equal_to_off"] == 1.0 and on["ttft_median_s"] > 0 and on["ttft_p90_s"] >= on["ttft_median_s"]
    assert len(on["ttft_median_by_turn_s"]) == 4 and on["prompt_tokens_by_turn"][-1] > on["prompt_tokens_by_turn"][0]
    meta = result["meta"]
    assert meta["gpu"] == "cpu" and meta["command"] == "hinfer bench --agent" and meta["commit"]
    assert meta["engine"]["on"]["checkpoint_slots"] == 1 and meta["engine"]["off"]["checkpoint_slots"] == 0
    out = list((tmp_path / "out").glob("*-agent-m-bf16.json"))
    assert len(out) == 1 and json.loads(out[0].read_text())["runs"]["on"]["turns"] == 8
    assert "| on |" in agent_table(result) and "| off |" in agent_table(result)
