"""Prefix cache with MTP speculation: a verified round caches its accepted drafts, so pages that fill inside a round
are named by those tokens, and a round that lands on a page boundary leaves a decode checkpoint. Greedy tokens
and their logprobs equal a cache-off engine without speculation across turns and under eviction churn; the
pages named during speculative decoding are exactly the conversation's; a soak with aborts leaks nothing.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_prefix_cache import PS, assert_clean, soak_turns, toks  # the same engine helpers

from hinfer.engine.prefix_cache import chain_hashes
from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec import DraftJob, Proposal
from hinfer.sampling_params import SamplingParams

LP_TOL = 1e-4  # as the cache-only tests: a right restore moves logprobs by ~1e-6, a wrong one by ~5e-3


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class KnownDrafter:
    """Proposes each request's known greedy continuation with every third position wrong: rounds accept 0, 1
    or 2 drafts, so page boundaries fall inside rounds, at their ends and between them."""

    def __init__(self) -> None:
        self.expected: dict[str, list[int]] = {}

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = []
        for j in jobs:
            n = len(j.seq.output_ids)
            known = self.expected.get(j.seq.request_id, [])[n : n + j.num_drafts]
            toks = [(t + 1) % 1024 if (n + i) % 3 == 2 else t for i, t in enumerate(known)]
            out.append(Proposal(toks) if j.num_drafts else None)
        return out


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=0)


def run_all(core, reqs: list[GenerationRequest], lps: dict[str, list[float]]) -> dict[str, tuple[list[int], int]]:
    for r in reqs:
        core.add(r)
    toks: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    out: dict[str, tuple[list[int], int]] = {}
    while len(out) < len(reqs):
        for ev in core.step():
            toks[ev.request_id] += ev.token_ids
            lps.setdefault(ev.request_id, []).extend(ev.logprobs or [])
            if ev.finish_reason:
                out[ev.request_id] = (toks[ev.request_id], ev.usage.cached_tokens)
    return out


def same(a: dict, b: dict, lp_a: dict, lp_b: dict) -> None:
    assert {k: t for k, (t, _) in a.items()} == {k: t for k, (t, _) in b.items()}
    gap = max(abs(x - y) for k in lp_a for x, y in zip(lp_a[k], lp_b[k]))
    assert gap < LP_TOL, gap


@pytest.mark.parametrize("drafter", ["known", "mtp"])
def test_turns_with_speculation_match_plain_cache_off(make_engine_core, drafter):
    rng = random.Random(11)
    off = make_engine_core(max_concurrency=2, prefix_cache=False)
    on = make_engine_core(max_concurrency=2, spec="mtp", draft_tokens=3, spec_adaptive=False)
    assert on.prefix is not None and on.spec is not None
    known = KnownDrafter()
    if drafter == "known":
        on.spec.drafter = known
    history, cached = toks(rng, 45), []
    for turn in range(5):
        prompt = history + toks(rng, 7)
        req = [GenerationRequest(f"t{turn}", prompt, greedy(23))]
        lp_off, lp_on = {}, {}
        b = run_all(off, req, lp_off)
        known.expected = {f"t{turn}": b[f"t{turn}"][0]}
        a = run_all(on, req, lp_on)
        same(a, b, lp_on, lp_off)
        answer, c = a[f"t{turn}"]
        cached.append(c)
        # every full page of what the request cached (prompt + answer but its last token) is named by its tokens
        seen = prompt + answer[:-1]
        names = chain_hashes(seen, PS)
        assert len(on.prefix.pages.match(names)) == len(names)
        history = prompt + answer
    assert cached[0] == 0 and all(c > 0 and c % PS == 0 for c in cached[1:])
    st = on.stats().extra
    assert st["prefix_hit_tokens"] == sum(cached)
    if drafter == "known":
        assert 0 < st["spec_accepted"] < st["spec_drafted"]
    assert_clean(on)


def test_eviction_churn_with_speculation(make_engine_core):
    """Small pools (16 KV pages, 2 checkpoint slots), three lanes of growing conversations, drafts partly right."""
    rng = random.Random(12)
    kw = dict(max_concurrency=3, kv_capacity=16 * PS, prefill_chunk=32)
    on = make_engine_core(prefix_cache_slots=2, spec="mtp", draft_tokens=2, spec_adaptive=False, **kw)
    off = make_engine_core(prefix_cache=False, **kw)
    known = on.spec.drafter = KnownDrafter()
    convs = [toks(rng, rng.randint(20, 50)) for _ in range(6)]
    for rnd in range(10):
        reqs = []
        for i in rng.sample(range(6), 2):
            h = convs[i]
            if len(h) > 150:
                h[:] = toks(rng, 30)
            h += toks(rng, rng.randint(1, 9))
            reqs.append((i, GenerationRequest(f"c{i}-{rnd}", list(h), greedy(rng.randint(3, 14)))))
        lp_on, lp_off = {}, {}
        b = run_all(off, [r for _, r in reqs], lp_off)
        known.expected = {k: t for k, (t, _) in b.items()}
        a = run_all(on, [r for _, r in reqs], lp_on)
        same(a, b, lp_on, lp_off)
        for i, r in reqs:
            convs[i] += a[r.request_id][0]
        on.prefix.pages.check()
        on.prefix.checkpoints.check()
    st = on.stats().extra
    assert st["prefix_evicted_pages"] > 0 and st["prefix_hit_tokens"] > 0 and st["spec_accepted"] > 0
    assert_clean(on)


def test_soak_with_speculation_leaks_nothing(make_engine_core):
    rng = random.Random(13)
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=32, kv_capacity=40 * PS,
                            prefix_cache_slots=5, spec="mtp", draft_tokens=2)  # fmt: skip
    st0 = core.stats()
    roots = [toks(rng, rng.randint(10, 60)) for _ in range(4)]
    hits = soak_turns(core, rng, roots, requests=120, max_len=250)
    assert hits > 20
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.queue_depth) == (st0.pages_free, st0.slots_free, 0)
    assert_clean(core)
