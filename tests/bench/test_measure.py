"""The benchmark's measurement loops run the engine's real path (here on the CPU reference, at a tiny size; the
timings mean nothing, the bookkeeping does): decode steps and speculative rounds, every lane drafting K tokens
each round, with their byte floors."""

from __future__ import annotations

import pytest
import torch

from hinfer.bench import floors, measure


@pytest.mark.parametrize("graphs", [False, True])
def test_spec_rounds_draft_k_every_round(make_engine_core, graphs):
    k, lanes, depth = 3, 2, 40
    core = make_engine_core(max_concurrency=lanes, spec="mtp", draft_tokens=k, spec_adaptive=False)
    if graphs:  # the padded static batches of the graph path, run eagerly
        core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(lanes, capture=False)
    core.runner.state.fill_random()
    t = measure.spec_rounds(core, lanes, depth, rounds=4, warmup=2)
    assert t.ms_per_round > 0 and t.rounds == 4
    assert 0 < t.ms_p10 <= t.ms_per_round <= t.ms_p90 and t.ms_mean > 0  # the median inside the window's spread
    assert t.drafted_per_round == k  # every lane drafted K tokens in every timed round
    assert 1 <= t.tokens_per_round <= k + 1
    assert t.chained == (1.0 if graphs else 0.0)  # the graph path drafts each next round ahead of the read


def test_decode_steps(make_engine_core):
    core = make_engine_core(max_concurrency=2)
    core.runner.state.fill_random()
    t = measure.decode(core.runner, 2, 30, steps=3, warmup=1)
    assert t.tok_s > 0 and t.steps == 3


def test_prefill_runs_warmup_then_repeats(make_engine_core, monkeypatch):
    core = make_engine_core(max_concurrency=1)
    runs = []
    step = core.runner.step
    monkeypatch.setattr(core.runner, "step", lambda chunks: (runs.append(chunks[0].num_tokens), step(chunks))[1])
    t = measure.prefill(core.runner, 40, 16, repeats=2)
    assert t.tok_s > 0 and runs == [16, 16, 8] * 3  # one untimed run, two timed
    runs.clear()
    measure.prefill(core.runner, 40, 16, repeats=1, warmup=False)
    assert runs == [16, 16, 8]


def test_long_prefill_logs_its_progress(make_engine_core, monkeypatch, caplog):
    core = make_engine_core(max_concurrency=1)
    monkeypatch.setattr(measure, "PROGRESS_S", 0.0)  # every chunk but the last
    with caplog.at_level("INFO", logger="hinfer.bench"):
        measure.prefill(core.runner, 40, 16, repeats=1, warmup=False)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("prefill 40:")]
    assert [line.split(" in ")[0] for line in lines] == ["prefill 40: 16 tokens", "prefill 40: 32 tokens"]


def test_spec_round_floor_counts_drafts(tiny_model):
    cfg, model = tiny_model
    w, d = floors.weight_bytes_per_step(model), floors.mtp_bytes_per_draft(model)
    assert d >= model.lm_head.numel() * model.lm_head.element_size()
    plain = floors.decode_step_bytes(cfg, w, 2, 100, 2, 2)
    r1 = floors.spec_round_bytes(cfg, w, d, 2, 100, 1, 2, 2)
    r3 = floors.spec_round_bytes(cfg, w, d, 2, 100, 3, 2, 2)
    assert r1.weights == plain.weights + d and r3.weights == plain.weights + 3 * d
    assert plain.total < r1.total < r3.total




def test_moe_floor_counts_only_the_experts_tokens_select():
    from hinfer.config import ModelConfig
    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.quant import quantize_model

    cfg = ModelConfig.from_dict(dict(
        model_type="qwen3_5_moe_text", vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=64,
        linear_value_head_dim=64, intermediate_size=256, num_experts=16, num_experts_per_tok=2,
        moe_intermediate_size=128, shared_expert_intermediate_size=128, mtp_num_hidden_layers=1,
        tie_word_embeddings=False))  # fmt: skip
    model = Qwen35ForCausalLM(cfg, torch.bfloat16, "cpu")
    quantize_model(model, "int4")
    e = floors.expert_bytes(model)
    per_layer = 16 * (256 * 128 // 2 + 256 * 3) + 16 * (128 * 128 // 2 + 128 * 3)  # int4 asym g128: scale + zero
    mtp_layer = 16 * (256 * 128 + 128 * 128) * 2  # the MTP head's experts stay bf16 (convert_mtp is off)
    assert e == cfg.num_hidden_layers * per_layer and floors.expert_bytes(model, mtp=True) == mtp_layer
    w = floors.weight_bytes_per_step(model)
    one = floors.decode_step_bytes(cfg, w, 1, 0, 2, 2, e).weights
    assert one == w - e + round(e * 2 / 16)  # one token reads 2 of 16 experts per layer
    eight = floors.decode_step_bytes(cfg, w, 8, 0, 2, 2, e).weights
    assert eight == w - e + round(e * (1 - (14 / 16) ** 8)) and one < eight < w
    assert floors.spec_round_bytes(cfg, w, 0, 1, 0, 3, 2, 2, e).weights == w - e + round(e * (1 - (14 / 16) ** 4))
    d1, d8 = floors.mtp_bytes_per_draft(model, None, 1), floors.mtp_bytes_per_draft(model, None, 8)
    assert d8 - d1 == round(mtp_layer * (1 - (14 / 16) ** 8)) - round(mtp_layer * 2 / 16)


def test_no_gc_holds_the_collector_off_and_restores_it():
    import gc

    assert gc.isenabled()
    with measure.no_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with measure.no_gc():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
