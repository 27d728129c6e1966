"""Adaptive speculation (engine/spec/adaptive.py): greedy output equals plain decoding whatever K each step uses,
a drafter that is never right drives the engine to plain steps, one that is always right keeps K_max.

The cost model is fixed (`spec_draft_cost`): host timings would make the K choices depend on the machine.
"""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec import DraftJob, Proposal
from hinfer.engine.spec.adaptive import AdaptivePolicy, LaneAcceptance, StepCosts, expected_tokens
from hinfer.sampling_params import SamplingParams as SP

VOCAB = 1024


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class ScriptedDrafter:
    """Proposes each request's known greedy continuation, each token right with probability `p` (seeded), else
    a wrong token; records the step K the engine chose after each call."""

    def __init__(self, expected: dict[str, list[int]], p: float, seed: int = 0) -> None:
        self.expected, self.p, self.rng = expected, p, random.Random(seed)

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = []
        for j in jobs:
            n = len(j.seq.output_ids)
            toks = self.expected[j.seq.request_id][n : n + j.num_drafts]
            toks = [t if self.rng.random() < self.p else (t + 1) % VOCAB for t in toks]
            out.append(Proposal(toks) if j.num_drafts else None)
        return out


def run_all(core, reqs: list[GenerationRequest]) -> tuple[dict[str, list[int]], dict, list[int]]:
    """-> (tokens per request, final event per request, the K chosen after every step)."""
    for r in reqs:
        core.add(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    final, ks = {}, []
    while len(final) < len(reqs):
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
            if ev.finish_reason:
                final[ev.request_id] = ev
        if core.spec is not None:
            ks.append(core.spec.batch_k)
    return out, final, ks


def requests(n: int, max_tokens: int = 24, seed: int = 3) -> list[GenerationRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(1, VOCAB) for _ in range(rng.choice([1, 4, 17, 30]))]
        p = SP(temperature=0, max_tokens=max_tokens - i % 5, ignore_eos=True)
        if i % 3 == 1:
            p = SP(temperature=0, max_tokens=max_tokens, ignore_eos=True, presence_penalty=1.2, logit_bias={7: 2.0})
        out.append(GenerationRequest(f"r{i}", prompt, p))
    return out


def adaptive_core(make_engine_core, lanes: int, k: int, **kw):
    return make_engine_core(max_concurrency=lanes, prefill_chunk=16, spec="mtp", draft_tokens=k,
                            spec_draft_cost=0.3, **kw)  # fmt: skip


# ---- the policy alone ------------------------------------------------------------------------------------
def test_policy_rates_and_choices():
    pol = AdaptivePolicy(3, StepCosts(3, draft_cost=0.3, measure=False))
    st = pol.new_lane()
    assert st.rate == pytest.approx(0.6)
    for _ in range(4):
        pol.observe(st, 3, 0)  # rejected at once: one trial, none kept
    assert st.rate < 0.15 and pol.lane_k(st, 1, 3) == 0
    hi = LaneAcceptance(10.0, 10.0)
    assert pol.lane_k(hi, 1, 3) == 3 and pol.lane_k(hi, 1, 2) == 2  # the budget caps it
    assert expected_tokens(1.0, 3) == 4 and expected_tokens(0.0, 3) == 1
    # one lane that accepts everything among seven that accept nothing: one verify step is not worth it
    assert pol.choose([(hi, 3)] + [(LaneAcceptance(0.0, 5.0), 0)] * 7) == 0
    assert pol.choose([(hi, 3)] * 2) == 3
    assert [pol.probe_due(st, False) for _ in range(8)] == [False] * 7 + [True]


def test_failed_probes_come_ever_more_rarely_until_a_draft_is_accepted():
    """Each probe doubles the lane's wait for the next (8, 16, 32, then 64 rounds at most); an accepted draft puts
    it back to 8."""
    pol = AdaptivePolicy(3, StepCosts(3, draft_cost=0.3, measure=False))
    st = pol.new_lane()

    def gaps(n: int) -> list[int]:
        out, last = [], 0
        for r in range(1, n + 1):
            if pol.probe_due(st, False):
                out.append(r - last)
                last = r
        return out

    assert gaps(8 + 16 + 32 + 64 + 64) == [8, 16, 32, 64, 64]
    pol.observe(st, 1, 0)  # a failed probe changes nothing
    assert gaps(64) == [64]
    pol.observe(st, 1, 1)
    assert gaps(8 + 16) == [8, 16]


def test_step_costs_use_host_timings_once_both_are_timed():
    c = StepCosts(3, draft_cost=0.3)
    assert c.ratio(5, 2) == pytest.approx(1.6)
    for _ in range(4):  # a key's first sample is dropped
        c.record(9, 0, 0.010)
        c.record(10, 2, 0.025)  # lanes 9 and 10 share the graph bucket of 12
    assert c.ratio(11, 2) == pytest.approx(2.5) and c.ratio(1, 2) == pytest.approx(1.6)
    assert c.table() == {"spec_cost_b12_k2": 2.5}
    fixed = StepCosts(3, draft_cost=0.5, measure=False)
    fixed.record(1, 0, 1.0)
    assert fixed.ratio(1, 2) == 2.0


def test_step_costs_ignore_a_first_compile_and_later_stalls():
    """A verify step that compiled its kernels (seconds) first, and a stall later, leave the ratio the steady one:
    the key's first sample is dropped and the median of the window ignores the stall."""
    c = StepCosts(3)
    for t in (3.0, 0.010, 0.010, 0.011, 0.010):
        c.record(1, 0, t)
    for t in (2.5, 0.016, 0.015, 0.9, 0.016, 0.015):
        c.record(1, 3, t)
    assert c.ratio(1, 3) == pytest.approx(1.6, rel=0.1)


# ---- the engine ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1.0, 0.0, 0.5], ids=["accept", "reject", "half"])
@pytest.mark.parametrize("lanes,k", [(1, 1), (2, 5), (3, 2), (8, 3), (5, 4)])
def test_adaptive_greedy_equals_plain_decoding(make_engine_core, lanes, k, p):
    base, base_final, _ = run_all(make_engine_core(max_concurrency=lanes, prefill_chunk=16), requests(lanes + 2))
    core = adaptive_core(make_engine_core, lanes, k)
    core.spec.drafter = ScriptedDrafter(base, p, seed=lanes * 10 + k)
    got, final, ks = run_all(core, requests(lanes + 2))
    assert got == base
    assert all(final[r].finish_reason == base_final[r].finish_reason for r in base)
    if p == 0.0:
        assert 0 in ks
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.lanes_busy) == (st.pages_total, st.slots_total, 0)


@pytest.mark.parametrize("lanes,k", [(1, 3), (4, 5)])
def test_adaptive_with_the_mtp_head_and_graph_batches(make_engine_core, lanes, k):
    """The random MTP head (acceptance near zero): plain steps through the runner's decode graph batches, verify
    steps through the verify graph batches (run eagerly here), greedy output unchanged."""
    base, _, _ = run_all(make_engine_core(max_concurrency=lanes, prefill_chunk=16), requests(lanes + 1, 30))
    core = adaptive_core(make_engine_core, lanes, k)
    core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(lanes, capture=False)
    got, _, ks = run_all(core, requests(lanes + 1, 30))
    assert got == base
    st = core.stats().extra
    assert st["spec_plain_steps"] > 0 and st["spec_drafted"] > 0 and 0 in ks


def test_plain_steps_run_ahead_and_feed_the_drafter_every_position(make_engine_core):
    """At K = 0 the engine queues each plain step before reading the previous one's tokens, as without --spec
    (EngineCore._chain; SpecDecoder.landed takes the tokens): greedy output unchanged, most plain steps run
    ahead, and the drafter is still fed every position of every lane once and in order (probe drafts
    included), as with the ahead steps off."""
    lanes, k = 3, 3
    reqs = lambda: [GenerationRequest(f"r{i}", [5 + i, 9, 2, 11][: 1 + i], SP(temperature=0, max_tokens=50,  # noqa: E731
                                                                           ignore_eos=True)) for i in range(lanes)]  # fmt: skip
    base, _, _ = run_all(make_engine_core(max_concurrency=lanes), reqs())

    def run(ahead: bool) -> tuple[dict, dict, int]:
        core = adaptive_core(make_engine_core, lanes, k, decode_ahead=ahead)
        core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(lanes, capture=False)
        inner, fed = ScriptedDrafter(base, 0.0), {}

        class Recording:
            def draft(self, jobs):
                for j in jobs:
                    fed.setdefault(j.seq.request_id, []).append((j.start, len(j.next_ids)))
                return inner.draft(jobs)

        core.spec.drafter = Recording()
        landed, real = [0], core.spec.landed

        def count(*a):
            landed[0] += 1
            return real(*a)

        core.spec.landed = count
        got, _, _ = run_all(core, reqs())
        assert got == base, ahead
        return fed, core.stats().extra, landed[0]

    fed, st, landed = run(True)
    fed_sync, st_sync, landed_sync = run(False)
    assert landed_sync == 0 and landed > 0.6 * st["spec_plain_steps"], (landed, st)
    for rid, spans in fed.items():  # each lane's positions, once and in order, from 0
        assert spans[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:])), (rid, spans)
        end = spans[-1][0] + spans[-1][1]
        assert end >= sum(n for _, n in fed_sync[rid]) - k - 1, (rid, spans, fed_sync[rid])


def test_never_accepted_drafts_fall_back_to_plain_steps(make_engine_core):
    reqs = lambda: [GenerationRequest(f"r{i}", [5 + i, 9, 2], SP(temperature=0, max_tokens=80, ignore_eos=True))  # noqa: E731
                    for i in range(4)]  # fmt: skip
    base, _, _ = run_all(make_engine_core(max_concurrency=4), reqs())
    core = adaptive_core(make_engine_core, 4, 3)
    core.spec.drafter = ScriptedDrafter(base, 0.0)
    got, final, ks = run_all(core, reqs())
    assert got == base
    first_plain = ks.index(0)
    assert first_plain <= 4, ks  # a few rounds
    tail = ks[first_plain:]
    assert tail.count(0) >= 0.85 * len(tail), ks  # mostly plain; probes cost one verified draft now and then
    st = core.stats().extra
    assert st["spec_plain_steps"] > 4 * st["spec_verify_steps"]
    assert st["spec_accept_len_0"] == st["spec_rounds"] and st["spec_accepted"] == 0
    drafted = sum(final[r].timings.spec_drafted for r in got)
    assert drafted == st["spec_drafted"] < 4 * 80 // 4


def test_always_accepted_drafts_keep_k_max(make_engine_core):
    reqs = lambda: [GenerationRequest(f"r{i}", [5 + i, 9, 2], SP(temperature=0, max_tokens=60, ignore_eos=True))  # noqa: E731
                    for i in range(3)]  # fmt: skip
    base, _, base_ks = run_all(make_engine_core(max_concurrency=3), reqs())
    core = adaptive_core(make_engine_core, 3, 4)
    core.spec.drafter = ScriptedDrafter(base, 1.0)
    got, final, ks = run_all(core, reqs())
    assert got == base
    assert ks[2:-3] and all(k == 4 for k in ks[2:-3]), ks  # K_max once the prior has been confirmed
    st = core.stats().extra
    assert st["spec_accepted"] == st["spec_drafted"] and st["spec_plain_steps"] == 0
    assert all(final[r].timings.spec_accepted == final[r].timings.spec_drafted > 40 for r in got)


def test_fixed_k_when_adaptive_is_off(make_engine_core):
    reqs = [GenerationRequest("a", [1, 2, 3], SP(temperature=0, max_tokens=30, ignore_eos=True))]
    base, _, _ = run_all(make_engine_core(), reqs)
    core = make_engine_core(spec="mtp", draft_tokens=3, spec_adaptive=False)
    core.spec.drafter = ScriptedDrafter(base, 0.0)
    got, final, ks = run_all(core, [GenerationRequest("a", [1, 2, 3], SP(temperature=0, max_tokens=30,
                                                                          ignore_eos=True))])  # fmt: skip
    assert got == base and set(ks) == {3} and final["a"].timings.spec_drafted >= 28 * 3 - 3
