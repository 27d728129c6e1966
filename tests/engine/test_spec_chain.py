"""The next round's drafts queued before the host reads a round's acceptance (MTPDrafter._chain): through the
graph batches (run eagerly into static outputs, as replays leave them), every chained proposal equals the MTP head
recomputed from scratch at the positions the host kept, the output equals plain decoding, and rounds of every
accepted length were chained.

The model's head mostly repeats the target's last token (tests/drafting_models.py): rounds accept 0..K drafts."""

from __future__ import annotations

import copy
import random
from collections import Counter
from dataclasses import replace

import pytest
import torch
from drafting_models import alternating, repeat_head

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec.mtp import MTPDrafter
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.sampling_params import SamplingParams as SP
from tests.engine.test_spec_decode import mtp_from_scratch, run_all

SEED = 11


@pytest.fixture(scope="module")
def two_token_model(tiny_model) -> tuple[ModelConfig, Qwen35ForCausalLM]:
    return tiny_model[0], repeat_head(copy.deepcopy(tiny_model[1]))


def _core(model_pair, tokenizer, **kw):
    cfg, model = model_pair
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", **{"max_context": 512, "page_size": 16} | kw))
    return make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))


def _spec_core(pair, tokenizer, k: int):
    core = _core(pair, tokenizer, max_concurrency=4, prefill_chunk=16, spec="mtp", draft_tokens=k, spec_adaptive=False)
    core.runner.capture_graphs(4, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(4, capture=False)
    return core


def _checked(core) -> Counter:
    """Every proposal checked against the head from scratch; -> the accepted lengths of the rounds that chained."""
    mtp: MTPDrafter = core.spec.drafter
    chained: Counter = Counter()
    real_rows, real_draft = mtp._early_rows, mtp.draft

    def rows(jobs):
        out = real_rows(jobs)
        if isinstance(out, list):
            chained.update(len(j.next_ids) - 1 for j in jobs)
        return out

    def draft(jobs):
        props = real_draft(jobs)
        for job, prop in zip(jobs, props):
            if prop is not None:
                seq = job.seq
                assert prop.settle() == mtp_from_scratch(mtp, seq.prompt_ids + seq.output_ids, job.num_drafts)[1]
        return props

    mtp._early_rows, mtp.draft = rows, draft
    return chained


def _requests(k: int, params: SP) -> list[GenerationRequest]:
    rng = random.Random(SEED + k)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (5, 17, 30, 9)]
    return [GenerationRequest(f"r{i}", p, replace(params, seed=i)) for i, p in enumerate(prompts)]


@pytest.mark.parametrize("k", [2, 3, 4])
def test_chained_drafts_equal_the_head_from_scratch(two_token_model, tokenizer, k):
    print(f"test seed {SEED}")
    params = SP(temperature=0, max_tokens=60, ignore_eos=True)
    base = run_all(_core(two_token_model, tokenizer, max_concurrency=4, prefill_chunk=16), _requests(k, params))[0]
    core = _spec_core(two_token_model, tokenizer, k)
    chained = _checked(core)
    assert run_all(core, _requests(k, params))[0] == base
    print(f"chained rounds by accepted drafts: {sorted(chained.items())}")
    assert set(chained) == set(range(k + 1)), chained  # every accepted length, the full round's included
    assert sum(chained.values()) >= 30


def test_sampled_lanes_chain_on_their_judged_acceptance(two_token_model, tokenizer, monkeypatch):
    """Sampled lanes (argmax drafts judged on the device): the chain starts where the device's acceptance flags
    say, and the tokens equal those of the same seeds without the chain."""
    print(f"test seed {SEED}")
    from hinfer.engine.spec.decoder import SpecDecoder

    k, params = 3, SP(temperature=0.3, top_k=2, max_tokens=60, ignore_eos=True)
    core = _spec_core(two_token_model, tokenizer, k)
    chained = _checked(core)
    out = run_all(core, _requests(k, params))[0]
    print(f"chained rounds by accepted drafts: {sorted(chained.items())}")
    assert len(chained) >= 3 and sum(chained.values()) >= 30, chained
    monkeypatch.setattr(SpecDecoder, "_chains", lambda self, seq: False)
    plain = _spec_core(two_token_model, tokenizer, k)
    unchained = _checked(plain)
    assert run_all(plain, _requests(k, params))[0] == out and not unchained


def test_graph_batches_accept_every_draft_of_an_alternating_model(tiny_model, tokenizer):
    """A target that alternates two tokens and a head that drafts the alternation (tests/drafting_models.py): every
    draft is right and a round's drafts differ from step to step, so through the graph batches (static outputs)
    rounds keep all K, as eager steps do; a step's draft lost to a later one would cost most second drafts."""
    pair = (tiny_model[0], alternating(copy.deepcopy(tiny_model[1])))
    params = SP(temperature=0, max_tokens=60, ignore_eos=True)
    rate = {}
    for graphs in (True, False):
        core = _spec_core(pair, tokenizer, 3) if graphs else _core(pair, tokenizer, max_concurrency=4, spec="mtp",
                                                                     draft_tokens=3, spec_adaptive=False)  # fmt: skip
        out = run_all(core, _requests(3, params))[0]
        assert all(t[i] != t[i + 1] and t[i] in (3, 4) for t in out.values() for i in range(len(t) - 1))
        st = core.stats().extra
        rate[graphs] = st["spec_accepted"] / st["spec_rounds"]
    assert rate[True] == rate[False] >= 2.5, rate


def test_chain_switch_off_drafts_after_the_read(two_token_model, tokenizer, monkeypatch):
    """HINFER_SPEC_CHAIN=0: no round is chained, and the output is the chained engine's."""
    params = SP(temperature=0, max_tokens=40, ignore_eos=True)
    outs, chained = {}, {}
    for on in ("1", "0"):
        monkeypatch.setenv("HINFER_SPEC_CHAIN", on)
        core = _spec_core(two_token_model, tokenizer, 3)
        outs[on] = run_all(core, _requests(3, params))[0]
        chained[on] = core.stats().extra["spec_chained"]
    assert outs["1"] == outs["0"] and chained["1"] > 0 and chained["0"] == 0, chained
