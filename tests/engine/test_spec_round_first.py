"""Speculative rounds launched before the last round's bookkeeping (EngineCore._round_first: with decode ahead on,
the next round goes to the GPU right after the drafter's hand-out, before the prefix cache's page naming, the text
and the events of the round just read). Through the graph batches run eagerly, the engine gives the same tokens,
texts and finish reasons as with every round accounted before the next (decode ahead off), with lanes stopping
on stop tokens, stop strings and length, sampling, joining mid-stream and aborted in flight; rounds did go first;
nothing leaks; a decode checkpoint the prefix cache saves behind an early round restores the right state."""

from __future__ import annotations

import copy
import random

import torch
from drafting_models import alternating

from hinfer.config import EngineConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.sampling_params import SamplingParams as SP
from tests.engine.test_decode_ahead import (
    _assert_clean,
    _drive,
    abort_requests,
    ahead_against_in_turn,
    assert_aborts_cut_short,
    second_turn,
)
from tests.engine.test_prefix_cache import one_thread  # noqa: F401  (autouse: one torch thread here too)


def _graphs(core):
    core.runner.capture_graphs(core.ecfg.max_concurrency, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(core.ecfg.max_concurrency, capture=False)
    return core


def _spec_core(make_engine_core, first: bool, **kw):
    return _graphs(make_engine_core(decode_ahead=first, spec="mtp", draft_tokens=3, spec_adaptive=False, **kw))


def _early(core) -> list[int]:
    """The lanes of each round launched before the last one's bookkeeping, recorded."""
    lanes: list[int] = []
    real = core._round_first

    def counted(launched, outs):
        ok = real(launched, outs)
        if ok:
            lanes.append(len(outs))
        return ok

    core._round_first = counted
    return lanes


def test_rounds_first_equal_rounds_accounted_in_turn(make_engine_core, seed):
    got, in_turn, lanes, core = ahead_against_in_turn(lambda first, **kw: _spec_core(make_engine_core, first, **kw),
                                                      _early, seed)  # fmt: skip
    assert got == in_turn
    assert len(lanes) >= 5 and max(lanes) >= 2, lanes  # rounds went first, several lanes at once
    assert core.stats().extra["spec_rounds_first"] > 0  # the /metrics figure
    _assert_clean(core)
    assert core._round is None


def test_abort_in_flight_leaks_nothing(make_engine_core, seed):
    reqs = abort_requests(random.Random(seed), 9, 3, (8, 40))
    in_turn = _drive(_spec_core(make_engine_core, False, max_concurrency=3, prefill_chunk=16), reqs)
    core = _spec_core(make_engine_core, True, max_concurrency=3, prefill_chunk=16)
    lanes = _early(core)
    aborted_in_flight = []
    real_drop = core._drop_aborted

    def drop():
        if core._aborted and core._round is not None:
            aborted_in_flight.append(list(core._aborted))
        return real_drop()

    core._drop_aborted = drop
    got = _drive(core, reqs, {6: "a0", 11: "a2", 12: "a3", 20: "a6"})
    assert lanes and aborted_in_flight, (lanes, aborted_in_flight)
    assert_aborts_cut_short(got, in_turn)
    _assert_clean(core)


def test_accepted_drafts_with_rounds_first(tiny_model, tokenizer):
    """A model whose every draft is right (tests/drafting_models.py): rounds keep K drafts, the slots they move to
    and the lengths they add are the same whichever comes first, the round or the last one's bookkeeping."""
    cfg, model = tiny_model[0], alternating(copy.deepcopy(tiny_model[1]))
    out, rate = {}, {}
    for first in (True, False):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=512, page_size=16, max_concurrency=4,
                                                       spec="mtp", draft_tokens=3, spec_adaptive=False,
                                                       decode_ahead=first))  # fmt: skip
        core = _graphs(make_core(cfg, model, tokenizer, ecfg, torch.device("cpu")))
        lanes = _early(core)
        reqs = [(i, GenerationRequest(f"r{i}", [5 + i] * (3 + 7 * i), SP(temperature=0, max_tokens=50 + i,
                                                                           ignore_eos=True)))
                for i in range(4)]  # fmt: skip
        out[first] = _drive(core, reqs)
        st = core.stats().extra
        rate[first] = st["spec_accepted"] / st["spec_rounds"]
        assert bool(lanes) == first
        _assert_clean(core)
    assert out[True] == out[False]
    assert rate[True] == rate[False] >= 2.5, rate


def test_checkpoint_saved_behind_an_early_round_restores_the_right_state(make_engine_core, seed):
    """Turn 1 decodes with rounds going first past page boundaries (the prefix cache saves the GDN state there,
    queued behind the next round); turn 2 resumes from the last one, its logprobs as a cache-off engine's."""
    rng = random.Random(seed)
    on = _spec_core(make_engine_core, True)
    off = _spec_core(make_engine_core, False, prefix_cache=False)
    lanes = _early(on)
    prompt = [rng.randrange(1, 1024) for _ in range(21)]
    answer = _drive(on, [(0, GenerationRequest("t1", prompt, SP(temperature=0, max_tokens=40, ignore_eos=True)))])
    assert len(lanes) >= 10
    lp = second_turn({"on": on, "off": off}, prompt + answer["t1"][0] + [rng.randrange(1, 1024) for _ in range(5)])
    assert lp["on"][1] >= 48 and lp["off"][1] == 0, (lp["on"][1], lp["off"][1])
    assert max(abs(a - b) for a, b in zip(lp["on"][0], lp["off"][0])) < 1e-4
    _assert_clean(on)


def test_every_lane_aborted_in_flight(make_engine_core, seed):
    """Every lane of a round in flight aborted: the round lands empty, no next round is launched, nothing leaks, and
    the engine serves the next request as a fresh one."""
    rng = random.Random(seed)
    core = _spec_core(make_engine_core, True, max_concurrency=2)
    for i in range(2):
        core.add(GenerationRequest(f"x{i}", [rng.randrange(1, 1024) for _ in range(9)],
                                   SP(temperature=0, max_tokens=60, ignore_eos=True)))
    steps = 0
    while core._round is None:
        core.step()
        steps += 1
        assert steps < 100, "no round went first"
    core.abort("x0")
    core.abort("x1")
    finished = {ev.request_id: ev.finish_reason for ev in core.step() if ev.finish_reason}
    assert finished == {"x0": "abort", "x1": "abort"} and core._round is None and not core.has_work
    _assert_clean(core)
    fresh = _drive(core, [(0, GenerationRequest("y", [5, 6, 7], SP(temperature=0, max_tokens=12, ignore_eos=True)))])
    alone = _drive(_spec_core(make_engine_core, True, max_concurrency=2),
                   [(0, GenerationRequest("y", [5, 6, 7], SP(temperature=0, max_tokens=12, ignore_eos=True)))])
    assert fresh == alone
