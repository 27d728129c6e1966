"""`--spec ngram`: prompt-lookup drafts (hinfer.engine.spec.ngram). The index proposes what followed the latest
earlier occurrence of the longest suffix, built incrementally exactly as from scratch; through the engine,
greedy output is token-identical to plain decoding (stops, penalties and sampled lanes sharing the batches), the
drafts are used, and nothing leaks."""

from __future__ import annotations

import random

import pytest

from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec.ngram import NGRAM_MAX, NGRAM_MIN, NgramIndex
from hinfer.fixtures import fixed_test_seed
from hinfer.sampling_params import SamplingParams as SP
from tests.engine.test_spec_decode import assert_all_free, greedy_params, one_thread, run_all  # noqa: F401


def _brute(tokens: list[int], k: int) -> list[int]:
    """The lookup by scanning: the longest suffix (NGRAM_MAX .. NGRAM_MIN) with an earlier occurrence (ending
    before the last token), its latest one; the k tokens after it."""
    for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
        if len(tokens) <= n:
            continue
        suffix = tokens[-n:]
        for end in range(len(tokens) - 1, n - 1, -1):  # occurrence tokens[end - n : end], end <= len - 1
            if tokens[end - n : end] == suffix:
                return tokens[end : end + k]
    return []


def test_the_index_proposes_what_followed_the_longest_suffix():
    idx = NgramIndex()
    idx.extend([1, 2, 3, 4, 9, 2, 3, 4, 7, 1, 2, 3])
    assert idx.propose(3) == [4, 9, 2]  # (1, 2, 3) occurred at the start; (2, 3) later would give 4, 7, 1
    idx.extend([5])
    assert idx.propose(3) == []  # nothing ends in (3, 5) before
    idx.extend([6, 3, 5])
    assert idx.propose(4) == [6, 3, 5]  # only as far as the tokens go
    run = NgramIndex()
    run.extend([8, 8, 8])
    assert run.propose(5) == [8]  # an overlapping occurrence: the newest token follows it


def test_the_index_grown_token_by_token_equals_one_built_at_once():
    rng = random.Random(fixed_test_seed())
    for _ in range(20):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 120))]
        grown, pos = NgramIndex(), 0
        while pos < len(tokens):
            step = rng.randrange(1, 6)
            grown.extend(tokens[pos : pos + step])
            pos += step
            assert grown.propose(4) == _brute(tokens[:pos], 4), tokens[:pos]


@pytest.mark.parametrize("lanes,k,adaptive", [(1, 3, False), (3, 2, True), (4, 4, False)])
def test_greedy_token_identical_with_prompt_lookup(make_engine_core, lanes, k, adaptive):
    rng = random.Random(fixed_test_seed() + 7)
    block = [rng.randrange(1, 1024) for _ in range(12)]
    # prompts that repeat themselves (what the drafts look up), and some that do not
    prompts = [block * 3 + [rng.randrange(1, 1024) for _ in range(i)] if i % 2 else
               [rng.randrange(1, 1024) for _ in range(5 + 3 * i)] for i in range(8)]  # fmt: skip
    reqs = lambda: [GenerationRequest(f"g{i}", p, greedy_params(i)) for i, p in enumerate(prompts)]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=lanes, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=lanes, prefill_chunk=16, spec="ngram", draft_tokens=k,
                            spec_adaptive=adaptive, spec_draft_cost=0.1)  # fmt: skip
    sampled = [GenerationRequest(f"x{i}", prompts[i], SP(temperature=1.0, top_k=50, seed=i, max_tokens=10))
               for i in range(lanes)]  # fmt: skip
    got = run_all(core, reqs() + sampled)[0]
    for rid, toks in base.items():
        assert got[rid] == toks, (lanes, k, rid)
    assert all(len(got[r.request_id]) == 10 for r in sampled)
    st = core.stats()
    assert st.extra["spec_drafted"] > 0 and 0 < st.extra["spec_accepted"] <= st.extra["spec_drafted"]
    assert_all_free(core)


@pytest.mark.parametrize("window,want", [(100, [9, 5, 6]), (8, [])])
def test_a_long_history_is_indexed_from_its_window(monkeypatch, window, want):
    """A lane's first draft indexes only the last NGRAM_WINDOW tokens (an occurrence before them is not found);
    the job's newest token comes from its next ids, the earlier ones from the sequence."""
    from types import SimpleNamespace

    import torch

    from hinfer.engine.spec import ngram
    from hinfer.engine.spec.drafter import DraftJob

    monkeypatch.setattr(ngram, "NGRAM_WINDOW", window)
    toks = [1, 2, 3, 9, 5, 6, 7, 8, 1, 2, 3]
    seq = SimpleNamespace(draft_index=None, tokens_between=lambda a, b: toks[a:b])
    job = DraftJob(seq, start=9, next_ids=[toks[10]], hidden=torch.empty(0), num_drafts=3)
    (prop,) = ngram.NgramDrafter().draft([job])
    assert prop.tokens == want
    assert seq.draft_index.base == max(0, 10 - window) and seq.draft_index.tokens == toks[seq.draft_index.base :]
