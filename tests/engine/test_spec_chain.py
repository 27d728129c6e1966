"""The next round's drafts queued before the host reads a round's acceptance (MTPDrafter._chain): through the
graph batches (run eagerly into static outputs, as replays leave them), every chained proposal equals the MTP head
recomputed from scratch at the positions the host kept, the output equals plain decoding, and rounds of every
accepted length were chained.

The model's lm_head keeps two opposite rows (every other id scores 0) and its head mostly repeats the target's last
token: rounds accept 0..K drafts."""

from __future__ import annotations

import copy
import random
from collections import Counter
from dataclasses import replace

import pytest
import torch

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
    cfg, model = tiny_model[0], copy.deepcopy(tiny_model[1])
    h, w = cfg.hidden_size, torch.randn(cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.lm_head.zero_()
        model.lm_head[3], model.lm_head[4] = w, -w
        # the head's fc passes the target's hidden state through (its layer still adds attention over its KV):
        # it mostly drafts the token the target just chose, so a round accepts as many drafts as the text repeats
        model.mtp.fc.zero_()
        model.mtp.fc[:, h:] = torch.eye(h)
        model.mtp.pre_fc_norm_hidden.zero_()  # (1 + weight) norms: the identity scale
    return cfg, model


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
