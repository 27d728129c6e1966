"""`hinfer bench` end to end on the CPU (--device cpu) at a tiny size: every stage runs (random quantized model
built layer by layer, decode and prefill on the engine's path, the speculative sweep over K), rows carry their
floors, and the JSON lands. The figures mean nothing here; the GPU run is what bench/RESULTS.md reports."""

from __future__ import annotations

import json

import pytest

from hinfer.bench.run import BenchSpec, run_bench, table
from hinfer.config import EngineConfig

TINY_MOE = {
    "model_type": "qwen3_5_moe_text", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "mtp_num_hidden_layers": 1,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "max_position_embeddings": 4096, "tie_word_embeddings": False,
}  # fmt: skip


@pytest.mark.parametrize("weights", ["int4", "fp8", "int4-mtp"])
def test_bench_runs_end_to_end_on_cpu(tmp_path, weights, monkeypatch):
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "0")  # recorded with the rows
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_MOE))
    spec = BenchSpec(model=str(tmp_path / "m"), weights=weights, concurrency=[1, 2], depths=[40], prefill=[48],
                     steps=4, out_dir=tmp_path / "out", draft_tokens=[1, 3], acceptance=[1.5, 3.2])  # fmt: skip
    rows = run_bench(spec, EngineConfig(device="cpu", spec="mtp", page_size=16, prefill_chunk=32))
    kinds = [r["kind"] for r in rows]
    assert kinds.count("decode") == 2 and kinds.count("prefill") == 1 and kinds.count("spec_round") == 4
    for r in rows:
        assert r["gpu"] == "cpu" and r["weights"] == weights and r["expert_bytes"] > 0
        assert r["switches"].get("HINFER_FUSE_LAUNCHES") == "0"
        if r["kind"] == "spec_round":
            assert r["ms_per_round"] > 0 and r["floor_ms_per_round"] > 0 and r["drafted_per_round"] == r["draft_tokens"]
            assert set(r["projected"]) == ({"1.5"} if r["draft_tokens"] == 1 else {"1.5", "3.2"})
        else:
            assert r["tok_s"] > 0 and r["floor_tok_s"] > 0
    out = list((tmp_path / "out").glob("*.json"))
    assert len(out) == 1 and len(json.loads(out[0].read_text())["rows"]) == len(rows)
    assert "projected" in table(rows)


def test_bench_refuses_a_plan_that_does_not_fit(tmp_path, monkeypatch):
    """The bench runs serve's memory plan before it builds any weight: a device too small fails at once with the
    plan's figures (a PlanError, which the CLI prints), not with an allocator error halfway through."""
    from hinfer.bench import run
    from hinfer.errors import PlanError

    built = []
    monkeypatch.setattr(run, "build_model", lambda *a, **k: built.append(1))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_MOE))
    spec = BenchSpec(model=str(tmp_path / "m"), weights="int4", concurrency=[8], depths=[40], prefill=[], steps=4,
                     out_dir=tmp_path / "out")  # fmt: skip
    with pytest.raises(PlanError, match="does not fit"):
        run_bench(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=32, gpu_memory=1 << 20))
    assert not built and not (tmp_path / "out").exists()


def test_decode_rows_per_sampling_mode(tmp_path, monkeypatch):
    """--sampling greedy,qwen,top-p: a decode row per mode, depth and lane count, each run with every lane
    sampling that way (the sampler's candidates and whole-vocabulary paths), labelled in the JSON and the table;
    --max-context widens the engine past what the points need (as a server's is)."""
    from hinfer.bench import measure

    made = []
    lanes = measure._lanes
    monkeypatch.setattr(measure, "_lanes", lambda *a, **k: made.append(lanes(*a, **k)) or made[-1])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_MOE))
    spec = BenchSpec(model=str(tmp_path / "m"), weights="int4", concurrency=[2], depths=[40], prefill=[], steps=4,
                     out_dir=tmp_path / "out", sampling=["greedy", "qwen", "top-p"], max_context=3000)  # fmt: skip
    rows = run_bench(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=32))
    assert [r["sampling"] for r in rows] == ["greedy", "qwen", "top-p"] and all(r["tok_s"] > 0 for r in rows)
    assert {r["max_context"] for r in rows} == {3000}  # as asked (a server's width), beyond the points' need
    got = [(s[0].params.temperature, s[0].params.top_k, s[0].params.top_p) for s in made]
    assert got == [(0.0, 0, 1.0), (1.0, 20, 0.95), (0.7, 0, 0.95)]
    assert "decode (qwen)" in table(rows) and "decode (top-p)" in table(rows)


def test_spec_rounds_per_sampling_mode(tmp_path):
    """--spec mtp --sampling greedy,qwen: a round row per mode (sampled lanes draft from the head's distribution
    and go through rejection sampling), every round drafting K for every lane."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_MOE))
    spec = BenchSpec(model=str(tmp_path / "m"), weights="int4", concurrency=[2], depths=[40], prefill=[], steps=4,
                     out_dir=tmp_path / "out", draft_tokens=[2], sampling=["greedy", "qwen"])  # fmt: skip
    rows = run_bench(spec, EngineConfig(device="cpu", spec="mtp", page_size=16, prefill_chunk=32))
    rounds = [r for r in rows if r["kind"] == "spec_round"]
    assert [r["sampling"] for r in rounds] == ["greedy", "qwen"]
    assert all(r["drafted_per_round"] == 2 and r["ms_per_round"] > 0 for r in rounds)
    assert "| 2 (qwen) |" in table(rows)


def test_bench_splits_over_two_ranks_on_cpu(tmp_path):
    """--tensor-parallel 2: rank 1 started and given its random shard, decode and prefill through the leader's
    runner, each rank's bytes in the floors (about half the weights), the step's all-reduces timed; the group is
    closed at the end."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_MOE))
    runs = {}
    for n in (1, 2):
        spec = BenchSpec(model=str(tmp_path / "m"), weights="int4", concurrency=[1, 2], depths=[40], prefill=[48],
                         steps=4, out_dir=tmp_path / f"out{n}")  # fmt: skip
        runs[n] = run_bench(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=32, tensor_parallel=n))
    kinds = [r["kind"] for r in runs[2]]
    assert kinds == ["decode", "decode", "prefill", "all_reduce", "all_reduce"]
    assert "all_reduce" not in [r["kind"] for r in runs[1]]
    one, two = runs[1][0], runs[2][0]
    assert two["tensor_parallel"] == 2 and one["tensor_parallel"] == 1
    # the embedding and lm_head split by vocabulary, heads and intermediate rows by rank: well under the whole
    assert 0.4 * one["weight_bytes"] < two["weight_bytes"] < 0.7 * one["weight_bytes"]
    for r in runs[2]:
        if r["kind"] == "all_reduce":
            assert r["all_reduces_per_step"] == 2 * TINY_MOE["num_hidden_layers"] + 1
            assert r["ms_per_step"] > 0 and 0 < r["floor_ms_per_step"] and r["bus_bw_gb_s"] > 0
        else:
            assert r["tok_s"] > 0 and r["floor_tok_s"] > 0
    assert "all-reduces a step" in table(runs[2])
