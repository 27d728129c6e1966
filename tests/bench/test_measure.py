"""The benchmark's measurement loops run the engine's real path (here on the CPU reference, at a tiny size; the
timings mean nothing, the bookkeeping does): decode steps and speculative rounds, every lane drafting K tokens
each round, with their byte floors."""

from __future__ import annotations

import pytest

from hinfer.bench import floors, measure


@pytest.mark.parametrize("graphs", [False, True])
def test_spec_rounds_draft_k_every_round(make_engine_core, graphs):
    k, lanes, depth = 3, 2, 40
    core = make_engine_core(max_concurrency=lanes, spec="mtp", draft_tokens=k)
    if graphs:  # the padded static batches of the graph path, run eagerly
        core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(lanes, capture=False)
    measure.fill_random(core.runner)
    t = measure.spec_rounds(core, lanes, depth, rounds=4, warmup=2)
    assert t.ms_per_round > 0 and t.rounds == 4
    assert t.drafted_per_round == k  # every lane drafted K tokens in every timed round
    assert 1 <= t.tokens_per_round <= k + 1


def test_decode_steps(make_engine_core):
    core = make_engine_core(max_concurrency=2)
    measure.fill_random(core.runner)
    t = measure.decode(core.runner, 2, 30, steps=3, warmup=1)
    assert t.tok_s > 0 and t.steps == 3


def test_spec_round_floor_counts_drafts(tiny_model):
    cfg, model = tiny_model
    w, d = floors.weight_bytes_per_step(model), floors.mtp_bytes_per_draft(model)
    assert d >= model.lm_head.numel() * model.lm_head.element_size()
    plain = floors.decode_step_bytes(cfg, w, 2, 100, 2, 2)
    r1 = floors.spec_round_bytes(cfg, w, d, 2, 100, 1, 2, 2)
    r3 = floors.spec_round_bytes(cfg, w, d, 2, 100, 3, 2, 2)
    assert r1.weights == plain.weights + d and r3.weights == plain.weights + 3 * d
    assert plain.total < r1.total < r3.total


