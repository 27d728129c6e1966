"""Speculative decoding (engine/spec/): greedy is token-exact, sampling keeps the target distribution, GDN state
rolls back by slot choice, and nothing leaks.

Reference ops are many small kernels: one intra-op thread is far faster on a busy CI box, so this module pins it.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from statistics import NormalDist

import pytest
import torch
from mtp_peek import PeekDrafter

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest, QueueFullError
from hinfer.engine.sampler import RowState, Sampler
from hinfer.engine.spec import DraftJob, MTPDrafter, Proposal
from hinfer.engine.spec.dist import Position, draw, processed_logits, sampling_probs
from hinfer.engine.spec.verify import accept
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.model.state import ModelState, StateShape
from hinfer.sampling_params import SamplingParams as SP

ALPHA = 1e-4  # significance of each distribution test: a correct implementation fails one in 10^4 runs


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ---- helpers ---------------------------------------------------------------------------------------------
def chi2_critical(df: int, alpha: float = ALPHA) -> float:
    """Upper alpha quantile of chi-square(df), Wilson-Hilferty (accurate to a few % for df >= 3)."""
    z = NormalDist().inv_cdf(1 - alpha)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2_two_sample(a: Counter, b: Counter, min_count: int = 10) -> tuple[float, int]:
    """Homogeneity of two samples over the same cells; rare cells pooled. -> (statistic, degrees of freedom)."""
    na, nb = sum(a.values()), sum(b.values())
    cells, rare = [], (0, 0)
    for c in set(a) | set(b):
        if a[c] + b[c] >= min_count:
            cells.append((a[c], b[c]))
        else:
            rare = (rare[0] + a[c], rare[1] + b[c])
    if sum(rare) > 0:
        cells.append(rare)
    stat = 0.0
    for x, y in cells:
        tot = x + y
        ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    return stat, len(cells) - 1


def chi2_fit(counts: Counter, probs: dict, n: int, min_expected: float = 5.0) -> tuple[float, int]:
    """Goodness of fit of counts to exact cell probabilities; cells expected below min_expected pooled."""
    stat, df, pool_o, pool_e = 0.0, -1, 0, 0.0
    for c, p in probs.items():
        e = n * p
        if e >= min_expected:
            stat += (counts[c] - e) ** 2 / e
            df += 1
        else:
            pool_o, pool_e = pool_o + counts[c], pool_e + e
    if pool_e > 0:
        stat += (pool_o - pool_e) ** 2 / pool_e
        df += 1
    assert sum(counts.values()) == n and set(counts) <= set(probs), "a sample outside the support"
    return stat, df


def run_all(core, reqs: list[GenerationRequest]) -> tuple[dict[str, list[int]], dict, int]:
    """-> (tokens per request, final event per request, engine steps)."""
    for r in reqs:
        core.add(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    final, steps = {}, 0
    while len(final) < len(reqs):
        steps += 1
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
            if ev.finish_reason:
                final[ev.request_id] = ev
    return out, final, steps


def assert_all_free(core) -> None:
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.lanes_busy, st.queue_depth) == (
        st.pages_total,
        st.slots_total,
        0,
        0,
    )


# ---- rejection sampling, in isolation -------------------------------------------------------------------
def test_accept_keeps_the_target_distribution_of_a_markov_chain():
    """Target and draft are two Markov chains over 6 tokens; rounds of K=3 drafts (fewer on some lanes), 40k lanes
    at once. The first three tokens must follow the target chain exactly."""
    g = torch.Generator().manual_seed(0)
    v, k, lanes, n_tok = 6, 3, 40_000, 3
    p_mat = -torch.log(torch.rand((v, v), generator=g))  # rows ~ Dirichlet(1) once normalized
    p_mat /= p_mat.sum(-1, keepdim=True)
    q_mat = -torch.log(torch.rand((v, v), generator=g))
    q_mat = 0.5 * q_mat / q_mat.sum(-1, keepdim=True) + 0.5 * p_mat
    q_mat[:, 0] += 0.3  # a draft that over-proposes token 0: rejections and residuals both matter
    q_mat /= q_mat.sum(-1, keepdim=True)
    gen = torch.full((lanes, n_tok * (k + 1)), -1, dtype=torch.int64)  # room for n_tok rounds
    length = torch.zeros(lanes, dtype=torch.int64)
    last = torch.zeros(lanes, dtype=torch.int64)
    lane = torch.arange(lanes)
    while bool((length < n_tok).any()):
        num = torch.randint(0, k + 1, (lanes,), generator=g)
        drafts, prev = [], last
        for _ in range(k):
            prev = torch.multinomial(q_mat[prev], 1, generator=g)[:, 0]
            drafts.append(prev)
        d = torch.stack(drafts, 1)
        ctx = torch.cat([last[:, None], d], 1)  # position j's context ends at ctx[:, j]
        p = p_mat[ctx]
        q = q_mat[ctx[:, :k]]
        u = torch.rand((lanes, k), generator=g, dtype=torch.float64)
        noise = -torch.log(-torch.log(torch.rand((lanes, v), generator=g)))
        a, t = accept(p, q, d, num, u, lambda r, noise=noise: draw(r, noise))
        assert bool((a <= num).all())
        for j in range(k + 1):  # emitted: d[:a] then t
            tok = torch.where(j < a, d[:, min(j, k - 1)], t)
            write = j <= a
            gen[lane[write], (length + j)[write]] = tok[write]
        length = length + a + 1
        last = gen[lane, length - 1]
    seqs = Counter(tuple(r) for r in gen[:, :n_tok].tolist())
    exact = {}
    for a_ in range(v):
        for b_ in range(v):
            for c_ in range(v):
                exact[(a_, b_, c_)] = float(p_mat[0, a_] * p_mat[a_, b_] * p_mat[b_, c_])
    stat, df = chi2_fit(seqs, exact, lanes)
    assert stat < chi2_critical(df), (stat, df)


def test_accept_greedy_is_argmax_agreement():
    v = 8
    target = torch.tensor([[3, 1, 4, 1], [2, 2, 2, 2], [5, 0, 0, 0]])  # argmax per position
    p = torch.nn.functional.one_hot(target, v).float()
    d = torch.tensor([[3, 1, 7], [2, 2, 2], [1, 0, 0]])
    q = torch.nn.functional.one_hot(d, v).float()
    u = torch.full((3, 3), 0.999999, dtype=torch.float64)
    noise = torch.randn(3, v)
    a, t = accept(p, q, d, torch.tensor([3, 3, 3]), u, lambda r: draw(r, noise))
    assert a.tolist() == [2, 3, 0] and t.tolist() == [4, 2, 5]
    a, t = accept(p, q, d, torch.tensor([1, 0, 3]), u, lambda r: draw(r, noise))  # fewer drafts than the width
    assert a.tolist() == [1, 0, 0] and t.tolist() == [1, 2, 5]


# ---- the sampler's distribution at speculative positions -------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        SP(temperature=1.0),
        SP(temperature=0.7, top_k=4),
        SP(temperature=1.3, top_p=0.6),
        SP(temperature=1.0, min_p=0.2, top_k=6, top_p=0.9),
        SP(
            temperature=0.8,
            presence_penalty=1.0,
            frequency_penalty=0.5,
            repetition_penalty=1.3,
            logit_bias={2: 1.5},
        ),
    ],
)
def test_sampling_probs_is_what_the_sampler_draws_from(params):
    v, n = 10, 4000
    logits = torch.randn(1, v, generator=torch.Generator().manual_seed(3)) * 1.5
    sampler = Sampler(v, "cpu", max_rows=n)
    rows = [RowState(replace(params, seed=s), seed=s, slot=s, prompt_ids=[1, 2]) for s in range(n)]
    for r in rows:
        sampler.add_row(r)
    sampler.update(rows, [[4, 4, 7]] * n)  # earlier output, for the penalties
    ids = sampler.sample(logits.expand(n, v), rows).token_ids.tolist()
    pos = [Position(rows[0])]
    probs = sampling_probs(processed_logits(sampler, logits, pos), pos)[0].tolist()
    stat, df = chi2_fit(Counter(ids), {i: pr for i, pr in enumerate(probs) if pr > 0}, n)
    assert stat < chi2_critical(max(df, 1)), (stat, df, probs)


def test_candidate_rows_take_the_whole_vocabulary_forms_probabilities():
    """Rows with 0 < top_k <= 256 get their probabilities from their 256 largest logits (a top-k, not a sort of
    the vocabulary): the whole-vocabulary form's up to rounding, alone and beside rows without a small top_k."""
    from hinfer.engine.spec.dist import _filtered_softmax, _vocab_softmax

    params = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=0.6, top_k=256, top_p=0.5, min_p=0.02),
              SP(temperature=1.2, top_k=3), SP(temperature=0.9, top_p=0.9), SP(temperature=1.0, top_k=400, min_p=0.1)]  # fmt: skip
    z = torch.randn(len(params), 3000, generator=torch.Generator().manual_seed(5)) * 3
    got = _filtered_softmax(z, params)
    want = torch.cat([_vocab_softmax(z[i : i + 1] / p.temperature, [p]) for i, p in enumerate(params)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert torch.equal((got > 0).sum(1), (want > 0).sum(1))  # the same tokens kept
    torch.testing.assert_close(_filtered_softmax(z[:2], params[:2]), want[:2], rtol=1e-5, atol=1e-7)


def test_the_race_among_candidates_draws_the_whole_races_tokens():
    """Rows with few nonzero probabilities (top_k <= 256, greedy one-hot) race among their 256 largest only, the
    noise hashed at those ids: the token of the race over every id, for every key."""
    from hinfer.engine.sampler import vocab_gamma
    from hinfer.engine.spec.dist import DRAFT, _filtered_softmax, draw, draw_among_candidates, race_noise

    v = 3000
    params = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=1.0, top_k=256), SP(temperature=0.8, top_k=2)]
    gamma = vocab_gamma(v, "cpu")
    g = torch.Generator().manual_seed(9)
    for step in range(30):
        probs = _filtered_softmax(torch.randn(3, v, generator=g) * 2, params)
        probs = torch.cat([probs, torch.nn.functional.one_hot(torch.tensor([17]), v).float()])  # a greedy row
        draws = [(7, step), (8, step), (9, step), None]
        want = draw(probs, race_noise(draws, DRAFT, gamma))
        assert torch.equal(draw_among_candidates(probs, draws, DRAFT, gamma), want), step


def test_prefix_counts_like_generated_tokens_and_leaves_the_sampler_as_found():
    v = 12
    p = SP(temperature=0.0, presence_penalty=0.7, frequency_penalty=0.4, repetition_penalty=1.2,
           thinking_budget=3, think_end_token_id=9)  # fmt: skip
    logits = torch.randn(4, v, generator=torch.Generator().manual_seed(1))
    sampler = Sampler(v, "cpu", max_rows=2)
    row = RowState(p, seed=1, slot=1, prompt_ids=[5])
    sampler.add_row(row)
    sampler.update([row], [[3]])
    before = sampler.counts.clone()
    prefixes = [[], [4], [4, 4], [4, 4, 6]]
    got = torch.cat(
        [processed_logits(sampler, logits[i : i + 1], [Position(row, pf)]) for i, pf in enumerate(prefixes)]
    )
    probs = sampling_probs(got, [Position(row, pf) for pf in prefixes])
    assert torch.equal(sampler.counts, before)
    for i, pf in enumerate(prefixes):
        ref_sampler = Sampler(v, "cpu", max_rows=2)
        ref = replace(row, num_generated=0, think_ended=False)
        ref_sampler.add_row(ref)
        ref_sampler.update([ref], [[3] + pf])
        assert torch.equal(got[i], ref_sampler.processed_logits(logits[i : i + 1], [ref])[0])
        want = ref_sampler.sample(logits[i : i + 1], [ref]).token_ids.item()  # greedy, or the forced </think>
        assert probs[i].tolist() == [1.0 if t == want else 0.0 for t in range(v)]
    assert probs[3].argmax().item() == 9  # four tokens in: the budget of 3 forces </think>


# ---- the engine -----------------------------------------------------------------------------------------
def greedy_params(i: int, stop_tok: int | None = None) -> SP:
    """Greedy requests with every sampler setting that changes the argmax: penalties, bias, thinking budget."""
    kind = i % 4
    if kind == 0:
        return SP(temperature=0, max_tokens=14, ignore_eos=True)
    if kind == 1:
        return SP(temperature=0, max_tokens=11, ignore_eos=True, presence_penalty=1.5, frequency_penalty=0.5,
                  repetition_penalty=1.3)  # fmt: skip
    if kind == 2:
        return SP(temperature=0, max_tokens=13, ignore_eos=True, logit_bias={17: 3.0}, thinking_budget=5,
                  think_end_token_id=23, stop_token_ids=[stop_tok] if stop_tok is not None else [])  # fmt: skip
    return SP(temperature=0, max_tokens=9, ignore_eos=True, logprobs=2)


def test_greedy_token_identical_with_and_without_mtp(make_engine_core):
    rng = random.Random(1234)
    lens = [1, 2, 5, 16, 17, 33, 47, 60]
    prompts = [[rng.randrange(1, 1024) for _ in range(lens[i % len(lens)])] for i in range(16)]
    base_core = make_engine_core(max_concurrency=4, prefill_chunk=16)
    base, base_final, _ = run_all(
        base_core, [GenerationRequest(f"g{i}", p, greedy_params(i)) for i, p in enumerate(prompts)]
    )
    # a stop token that occurs mid-output: stop rules cut an accepted run of drafts
    stop = {f"g{i}": base[f"g{i}"][5] for i in range(2, 16, 4)}
    base.update(run_all(base_core, [GenerationRequest(f"s{i}", prompts[i], greedy_params(i, int(stop[f"g{i}"])))
                                    for i in range(2, 16, 4)])[0])  # fmt: skip
    for lanes, k, adaptive in [(1, 1, False), (2, 2, True), (3, 3, False), (4, 4, True), (4, 1, False), (2, 4, False)]:
        core = make_engine_core(max_concurrency=lanes, prefill_chunk=16, spec="mtp", draft_tokens=k,
                                spec_adaptive=adaptive, spec_draft_cost=0.3)  # fmt: skip
        reqs = [GenerationRequest(f"g{i}", p, greedy_params(i)) for i, p in enumerate(prompts)]
        reqs += [
            GenerationRequest(f"s{i}", prompts[i], greedy_params(i, int(stop[f"g{i}"])))
            for i in range(2, 16, 4)
        ]
        # sampled lanes share the batches (their tokens differ from plain decoding: same law, other draws)
        reqs += [GenerationRequest(f"x{i}", prompts[i], SP(temperature=1.0, top_k=50, seed=i, max_tokens=12))
                 for i in range(lanes)]  # fmt: skip
        got, final, _ = run_all(core, reqs)
        for rid, toks in base.items():
            assert got[rid] == toks, (lanes, k, rid)
        for i in range(3, 16, 4):  # logprobs per token, as without speculation
            assert final[f"g{i}"].usage == base_final[f"g{i}"].usage
        st = core.stats()
        assert st.extra["spec_drafted"] > 0 and st.extra["spec_accepted"] <= st.extra["spec_drafted"]
        assert_all_free(core)


def test_greedy_logprobs_match_plain_decoding(make_engine_core):
    prompt = [5, 6, 7, 8]
    p = SP(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3, presence_penalty=0.5)
    plain = make_engine_core(max_concurrency=1)
    spec = make_engine_core(max_concurrency=1, spec="mtp", draft_tokens=3, spec_adaptive=False)
    spec.spec.drafter = OracleDrafter(run_all(plain, [GenerationRequest("a", prompt, p)])[0])
    evs_plain, evs_spec = [], []
    for core, evs in ((plain, evs_plain), (spec, evs_spec)):
        core.add(GenerationRequest("a", prompt, replace(p)))
        while core.has_work:
            evs += core.step()
    lp = [x for e in evs_plain for x in (e.logprobs or [])]
    lp2 = [x for e in evs_spec for x in (e.logprobs or [])]
    assert len(lp) == len(lp2) == 8 and lp == pytest.approx(lp2, abs=1e-4)
    tops = [[t.token_id for t in x] for e in evs_plain for x in (e.top_logprobs or [])]
    tops2 = [[t.token_id for t in x] for e in evs_spec for x in (e.top_logprobs or [])]
    assert tops == tops2
    assert len(evs_spec) < len(evs_plain)  # several tokens per event


@pytest.mark.parametrize("right", [False, True], ids=["mtp", "always-right"])
def test_prompt_logprobs_with_speculation(make_engine_core, right):
    """Requests that want their prompt logprobs beside speculating lanes (prompts in several chunks, lanes already
    decoding): prompt logprobs (top ones too), tokens and their logprobs are plain decoding's."""
    rng = random.Random(11)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (5, 37, 70)]
    wants = (None, 2, 0)

    def run(core) -> dict[str, tuple]:
        for i, p in enumerate(prompts):
            core.add(GenerationRequest(f"r{i}", p, SP(temperature=0, max_tokens=10, ignore_eos=True, logprobs=0,
                                                      prompt_logprobs=wants[i])))  # fmt: skip
        out = {f"r{i}": ([], [], None, None) for i in range(len(prompts))}
        done: set[str] = set()
        while len(done) < len(prompts):
            for ev in core.step():
                toks, lps, plp, tops = out[ev.request_id]
                toks += ev.token_ids
                lps += ev.logprobs or []
                if ev.prompt_logprobs is not None:
                    tops = [None if t is None else [x.token_id for x in t] for t in ev.prompt_top_logprobs]
                    out[ev.request_id] = (toks, lps, ev.prompt_logprobs, tops)
                if ev.finish_reason:
                    done.add(ev.request_id)
        return out

    base = run(make_engine_core(max_concurrency=3, prefill_chunk=16))
    core = make_engine_core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False)
    if right:
        core.spec.drafter = OracleDrafter({r: v[0] for r, v in base.items()})
    got = run(core)
    for i, r in enumerate(base):
        (t0, lp0, p0, top0), (t1, lp1, p1, top1) = base[r], got[r]
        assert t1 == t0 and lp1 == pytest.approx(lp0, abs=1e-4)
        if wants[i] is None:
            assert p0 is None and p1 is None
            continue
        assert len(p1) == len(prompts[i]) and p1[0] is None and top1 == top0
        assert p1[1:] == pytest.approx(p0[1:], abs=1e-4)
    assert core.stats().extra["spec_drafted"] > 0
    assert_all_free(core)


class OracleDrafter:
    """Proposes each request's known continuation (everything accepted), or a wrong token at every position."""

    def __init__(self, expected: dict[str, list[int]], wrong: bool = False, vocab: int = 1024) -> None:
        self.expected, self.wrong, self.vocab = expected, wrong, vocab
        self.jobs = 0

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = []
        for j in jobs:
            self.jobs += 1
            assert j.hidden.shape[0] == len(j.next_ids) > 0
            n = len(j.seq.output_ids)
            toks = self.expected[j.seq.request_id][n : n + j.num_drafts]
            if self.wrong:
                toks = [(t + 1) % self.vocab for t in toks]
            out.append(Proposal(toks) if j.num_drafts else None)
        return out


@pytest.mark.parametrize("wrong", [False, True])
def test_all_accepted_and_all_rejected_drafters(make_engine_core, wrong):
    rng = random.Random(7)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (3, 20, 41)]
    params = [greedy_params(i) for i in range(3)]
    base, _, base_steps = run_all(make_engine_core(max_concurrency=3, prefill_chunk=16),
                                  [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)])  # fmt: skip
    k = 3
    core = make_engine_core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=k, spec_adaptive=False)
    core.spec.drafter = OracleDrafter(base, wrong=wrong)
    got, final, steps = run_all(
        core, [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)]
    )
    assert got == base
    st = core.stats().extra
    for i in range(3):
        t, n = final[f"r{i}"].timings, params[i].max_tokens
        rounds = -(-(n - 1) // (k + 1)) if not wrong else n - 1
        # each round drafts min(K, tokens left - 1)
        if not wrong:
            assert t.spec_accepted == t.spec_drafted == n - 1 - rounds
        else:
            assert t.spec_accepted == 0 and t.spec_drafted >= n - 2
    assert (st["spec_accepted"] == st["spec_drafted"]) != wrong
    if not wrong:
        assert steps <= base_steps // 2  # K+1 tokens per step once prompts are in
    assert_all_free(core)


def test_rounds_never_pass_max_tokens_or_max_context(make_engine_core):
    """Everything accepted at K=4: rounds shrink to what max_tokens and max_context leave (KV pages reserved at
    admission are never exceeded) and stop exactly where plain decoding stops."""
    reqs = lambda: [  # noqa: E731
        GenerationRequest("ctx", list(range(1, 41)), SP(temperature=0, max_tokens=30, ignore_eos=True)),
        GenerationRequest("tok", [9, 8, 7], SP(temperature=0, max_tokens=7, ignore_eos=True)),
        GenerationRequest("one", [9, 8], SP(temperature=0, max_tokens=1, ignore_eos=True)),
    ]
    base, base_final, _ = run_all(make_engine_core(max_context=48), reqs())
    core = make_engine_core(max_context=48, spec="mtp", draft_tokens=4, spec_adaptive=False)
    core.spec.drafter = OracleDrafter(base)
    got, final, _ = run_all(core, reqs())
    assert got == base and len(got["ctx"]) == 8 and len(got["tok"]) == 7
    assert all(final[r].finish_reason == base_final[r].finish_reason == "length" for r in got)
    # ctx: 1 + (4+1) + (1+1) tokens, 7 then 2 left; tok: 1 + (4+1) + (0+1); one: the prompt's token only
    assert [final[r].timings.spec_drafted for r in ("ctx", "tok", "one")] == [5, 4, 0]
    assert_all_free(core)


def test_stop_string_inside_an_accepted_run(make_engine_core):
    prompt, p = [11, 12, 13], SP(temperature=0, max_tokens=16, ignore_eos=True)
    plain = make_engine_core()
    toks = run_all(plain, [GenerationRequest("a", prompt, replace(p))])[0]
    text = plain.tokenizer.decode(toks["a"][:9])
    stop = text[-3:] if len(text) >= 3 else text  # ends inside the 9th token's text, or earlier
    evs = {}
    for name, core in (("plain", make_engine_core()), ("spec", make_engine_core(spec="mtp", draft_tokens=4))):
        if core.spec is not None:
            core.spec.drafter = OracleDrafter(toks)
        core.add(GenerationRequest("a", prompt, replace(p, stop=[stop])))
        evs[name] = []
        while core.has_work:
            evs[name] += core.step()
    for name in evs:
        e = evs[name]
        evs[name] = ([t for x in e for t in x.token_ids], "".join(x.text for x in e), e[-1].finish_reason,
                     e[-1].stop_reason)  # fmt: skip
    assert evs["spec"] == evs["plain"] and evs["plain"][2] == "stop"


def peek_drafter(mtp: MTPDrafter, expected: dict[str, list[int]]) -> PeekDrafter:
    """The MTP drafter checked against the head from scratch at every draft, the known continuation proposed."""
    return PeekDrafter(mtp, OracleDrafter(expected),
                       lambda m, seq, k: mtp_from_scratch(m, seq.prompt_ids + seq.output_ids, k))


@torch.inference_mode()
def mtp_from_scratch(mtp: MTPDrafter, tokens: list[int], k: int) -> tuple[torch.Tensor, list[int]]:
    """The head's hidden states (at the last target position, then along the chain) and its k greedy drafts
    after `tokens` (the last one not yet run by the target), on a private state."""
    model, ps = mtp.model, 16
    pages = list(range(1, 2 + (len(tokens) + k) // ps))
    shape = StateShape(len(pages) + 1, ps, 2, torch.float32, torch.float32, mtp_layers=1)
    state = ModelState(model.cfg, shape, "cpu")
    n = len(tokens) - 1
    batch = build_forward_batch([SeqChunk(tokens[:n], 0, pages, 1, all_logits=True)], ps, "cpu")
    hidden = model(batch, state)
    hs = [model.mtp_forward(torch.tensor(tokens[1:]), hidden, batch, state)[-1:]]
    out = []
    for j in range(k):
        out.append(int(model.compute_logits(hs[-1]).argmax()))
        if j + 1 < k:  # the chain: the head's own hidden state stands in for the target's
            b = build_forward_batch([SeqChunk([out[-1]], n + j, pages, 1)], ps, "cpu")
            hs.append(model.mtp_forward(torch.tensor([out[-1]]), hs[-1], b, state))
    return [h[0] for h in hs], out


def test_mtp_head_sees_every_position_once_with_the_target_hidden_state(make_engine_core):
    rng = random.Random(3)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (1, 15, 16, 17, 40)]
    params = SP(temperature=0, max_tokens=12, ignore_eos=True)
    reqs = lambda: [GenerationRequest(f"r{i}", p, replace(params)) for i, p in enumerate(prompts)]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=3, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False)
    peek = core.spec.drafter = peek_drafter(core.spec.drafter, base)
    assert run_all(core, reqs())[0] == base
    assert peek.checked >= 5 * 3


def test_graph_drafts_equal_the_head_from_scratch(make_engine_core):
    """Through the head's graph batches (run eagerly into static outputs, as replays leave them) every round's K
    drafts, left on the device, equal the head recomputed from scratch: a step's drafts are kept before the next
    replay of the same graph overwrites its outputs (the third draft once overwrote the second)."""
    rng = random.Random(5)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (4, 19)]
    params = SP(temperature=0, max_tokens=40, ignore_eos=True)
    reqs = lambda: [GenerationRequest(f"r{i}", p, replace(params)) for i, p in enumerate(prompts)]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=2, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=2, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False)
    core.runner.capture_graphs(2, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(2, capture=False)
    peek = core.spec.drafter = peek_drafter(core.spec.drafter, base)
    assert run_all(core, reqs())[0] == base
    assert peek.checked >= 10


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph-batches"])
def test_aborts_mid_speculation_leak_nothing(make_engine_core, graphs):
    """Random requests, sampled and greedy, aborted at random mid-speculation; with the graph batches (run eagerly
    here) adaptive speculation's plain steps also run ahead, so aborts land between a step's launch and its
    read."""
    rng = random.Random(5)
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=16, kv_capacity=512,
                            spec="mtp", draft_tokens=2, spec_draft_cost=0.3)  # fmt: skip
    if graphs:
        core.runner.capture_graphs(4, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(4, capture=False)
    landed = [0]
    real_landed = core.spec.landed

    def count(*a):
        landed[0] += 1
        return real_landed(*a)

    core.spec.landed = count
    longest = 30 if graphs else 10  # long enough for lanes to fall back to plain steps
    live: set[str] = set()
    submitted = 0
    for _ in range(2000):
        if submitted < 80 and rng.random() < 0.5:
            rid = f"s{submitted}"
            submitted += 1
            p = SP(temperature=rng.choice([0, 1]), top_p=rng.choice([1.0, 0.8]), max_tokens=rng.randint(1, longest),
                   presence_penalty=rng.choice([0.0, 0.5]))  # fmt: skip
            try:
                core.add(
                    GenerationRequest(rid, [rng.randrange(1, 1024) for _ in range(rng.randint(1, 40))], p)
                )
                live.add(rid)
            except QueueFullError:
                pass
        if live and rng.random() < 0.25:
            core.abort(rng.choice(sorted(live)))
        for ev in core.step():
            if ev.finish_reason:
                live.discard(ev.request_id)
        if submitted >= 80 and not live:
            break
    while core.has_work:
        for ev in core.step():
            live.discard(ev.request_id)
    assert submitted == 80 and not live
    assert core.stats().extra["spec_drafted"] > 0
    assert (landed[0] > 0) == graphs, landed  # plain steps ran ahead only with the graph batches
    assert_all_free(core)
    assert all(s.drafts is None for s in core._by_id.values())


# ---- sampling through the engine: the distribution with speculation equals the one without ----------------
SMALL = {"vocab_size": 12, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "layer_types": ["linear_attention", "full_attention"]}  # fmt: skip


@pytest.fixture(scope="module")
def small_model(tiny_model):
    """The conftest's tiny model with 12 tokens and 2 layers: a distribution a few thousand draws pin down."""
    cfg = ModelConfig.from_dict(tiny_model[0].extra["raw"] | SMALL)
    return cfg, random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=11)


SAMPLED = [SP(temperature=1.0), SP(temperature=0.9, top_k=6, top_p=0.85, presence_penalty=0.8)]


@pytest.mark.parametrize("params, adaptive, draft", [
    (SAMPLED[0], False, "sample"), (SAMPLED[0], True, "sample"), (SAMPLED[1], False, "sample"),
    (SAMPLED[1], True, "sample"), (SP(temperature=0.9, top_k=6, top_p=0.85), False, "argmax"),
], ids=["t1-fixed", "t1-adaptive", "topk_topp_penalty-fixed", "topk_topp_penalty-adaptive", "topk_topp-argmax-drafts"])  # fmt: skip
def test_sampling_distribution_unchanged_by_speculation(small_model, tokenizer, params, adaptive, draft):
    """Sampled requests, with and without speculation: the first three tokens' distribution is the same
    (two-sample chi-square), whether the drafts are drawn from the head's distribution or are its argmax
    (--spec-draft argmax: a one-point draft distribution)."""
    cfg, model = small_model
    n, n_tok, prompt = 2500, 3, [3, 1, 4]

    def draws(**kw) -> tuple[Counter, object]:
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=64, page_size=16,
                                                       max_concurrency=64, max_pending_requests=n, **kw))  # fmt: skip
        core = make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))
        reqs = [GenerationRequest(f"r{s}", prompt, replace(params, seed=s, max_tokens=n_tok, ignore_eos=True))
                for s in range(n)]  # fmt: skip
        out = run_all(core, reqs)[0]
        return Counter(tuple(t) for t in out.values()), core

    plain, _ = draws()
    spec, core = draws(spec="mtp", draft_tokens=2, spec_adaptive=adaptive, spec_draft_cost=0.3, spec_draft=draft)
    st = core.stats().extra
    assert 0 < st["spec_accepted"] < st["spec_drafted"]  # both accepts and rejections happen
    stat, df = chi2_two_sample(plain, spec)
    assert stat < chi2_critical(df), (stat, df)


@pytest.mark.parametrize("drawing", [True, False], ids=["with-a-drawing-lane", "argmax-and-greedy-only"])
def test_argmax_drafts_beside_lanes_that_draw_or_force(make_engine_core, drawing):
    """--spec-draft argmax in a mixed batch: sampled lanes drafting the argmax beside a sampled lane with penalties
    (drawing from q), greedy lanes whose thinking budget forces `</think>` mid-round (a draft step on the q path
    for every lane) and plain greedy ones: every request completes, the greedy ones as plain decoding, nothing
    leaks."""
    rng = random.Random(4)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (5, 18, 33, 9, 26)]
    params = [SP(temperature=0.9, top_k=20, top_p=0.95, seed=1, max_tokens=16, ignore_eos=True),
              SP(temperature=1.0, top_k=8, seed=2, max_tokens=16, ignore_eos=True),
              SP(temperature=0.8, presence_penalty=0.5, seed=3, max_tokens=16, ignore_eos=True),
              SP(temperature=0, max_tokens=16, ignore_eos=True, thinking_budget=3, think_end_token_id=23),
              SP(temperature=0, max_tokens=16, ignore_eos=True)]  # fmt: skip
    keep = [i for i in range(5) if drawing or i != 2]
    reqs = lambda: [GenerationRequest(f"r{i}", prompts[i], replace(params[i])) for i in keep]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=5, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=5, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False,
                            spec_draft="argmax")  # fmt: skip
    got = run_all(core, reqs())[0]
    assert all(len(got[f"r{i}"]) == 16 for i in keep)
    assert got["r3"] == base["r3"] and got["r4"] == base["r4"]
    assert core.stats().extra["spec_drafted"] > 0
    assert_all_free(core)


@pytest.mark.parametrize("host_buffers", [1, 2])
def test_verify_and_draft_graph_batches_give_the_same_tokens(make_engine_core, monkeypatch, host_buffers):
    """The padded static batches of the CUDA-graph path (engine/cuda_graphs.py), run eagerly here: lanes with
    fewer drafts than K are padded to K + 1 tokens, fillers write only scratch page 0 / slot 0, and greedy
    outputs equal plain decoding. Every verify and draft step of the decoding lanes goes through them, the
    verify steps mostly with the drafts straight from the device, the greedy draft steps with their head and
    argmax in the same batch."""
    from hinfer.engine import cuda_graphs

    calls: Counter = Counter()
    real_run = cuda_graphs.StepGraphs.run

    def counting_run(self, chunks, hidden=None, ids=None, drafts=None, shift=None):
        calls["verify" if self.verify else f"{self.head}{self.t}"] += 1
        calls["drafts on the device"] += drafts is not None
        calls["argmax in the graph"] += self.tail is not None
        calls["moved on the device"] += shift is not None
        return real_run(self, chunks, hidden, ids, drafts, shift)

    monkeypatch.setattr(cuda_graphs.StepGraphs, "run", counting_run)
    monkeypatch.setattr(cuda_graphs, "HOST_BUFFERS", host_buffers)  # two: the GPU's staging, taken in turn
    rng = random.Random(99)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (1, 7, 16, 30, 45)]
    params = [greedy_params(i) for i in range(len(prompts))]
    base, _, _ = run_all(make_engine_core(max_concurrency=4, prefill_chunk=16),
                         [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)])  # fmt: skip
    for lanes, k in [(1, 3), (4, 2), (3, 4)]:
        core = make_engine_core(max_concurrency=lanes, prefill_chunk=16, spec="mtp", draft_tokens=k, spec_adaptive=False)
        core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(lanes, capture=False)
        calls.clear()
        got, _, _ = run_all(core, [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)])
        assert got == base, (lanes, k)
        assert calls["verify"] > 0 and calls["mtp1"] > 0 and calls[f"mtp{k + 1}"] > 0, calls
        assert calls["drafts on the device"] > 0, calls  # verify steps took the drafts the host had not read
        assert calls["argmax in the graph"] > 0, calls  # greedy draft steps: head and argmax in the step's batch
        assert (calls["moved on the device"] > 0) == (k > 1), calls  # steps queued before the acceptance read
        assert_all_free(core)


def test_the_early_draft_pass_drafts_what_the_pass_after_acceptance_drafts(small_model, tokenizer, monkeypatch):
    """Plain greedy lanes through the graph batches: the drafter's pass over a verified round is queued before
    the acceptance is read, over all K + 1 rows with the target's argmax as the next tokens. Its drafts, and so
    every token, equal those of the pass run after acceptance over the accepted rows only (12 tokens: drafts are
    accepted often enough that rounds keep 0 to K of them)."""
    from hinfer.engine.spec import mtp as mtp_mod

    cfg, model = small_model
    rng = random.Random(5)
    prompts = [[rng.randrange(1, 12) for _ in range(n)] for n in (4, 19, 33)]
    params = SP(temperature=0, max_tokens=40, ignore_eos=True)
    real_draft, real_rows = mtp_mod.MTPDrafter.draft, mtp_mod.MTPDrafter._early_rows

    def core_of(**kw):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=128, page_size=16, max_concurrency=3,
                                                       prefill_chunk=16, **kw))  # fmt: skip
        return make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))

    def reqs():
        return [GenerationRequest(f"r{i}", p, params) for i, p in enumerate(prompts)]

    def run(early: bool) -> tuple[dict, list, int, list]:
        drafts, used = [], []

        def draft(self, jobs):
            props = real_draft(self, jobs)
            drafts.extend((j.seq.request_id, j.start, p.settle()) for j, p in zip(jobs, props) if p is not None)
            return props

        def rows(self, jobs):
            h = real_rows(self, jobs)
            used.append(h is not None)
            return h

        monkeypatch.setattr(mtp_mod.MTPDrafter, "draft", draft)
        monkeypatch.setattr(mtp_mod.MTPDrafter, "_early_rows", rows)
        if not early:
            monkeypatch.setattr(mtp_mod.MTPDrafter, "prelaunch", lambda self, *a: False)
        core = core_of(spec="mtp", draft_tokens=3, spec_adaptive=False)
        core.runner.capture_graphs(3, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(3, capture=False)
        got, _, _ = run_all(core, reqs())
        assert_all_free(core)
        monkeypatch.undo()
        return got, drafts, sum(used), core.spec.accept_hist

    plain, _, _ = run_all(core_of(), reqs())
    with_early, drafts_early, used, hist = run(True)
    without, drafts_late, unused, _ = run(False)
    assert with_early == without == plain
    assert drafts_early == drafts_late
    assert used > 5 and unused == 0, (used, unused)
    assert hist[0] > 0 and sum(hist[1:]) > 0, hist  # rounds that kept none of their drafts, and some that kept more


def test_sampled_lanes_judged_on_the_device_give_the_tokens_judged_after_the_read(small_model, tokenizer, monkeypatch):
    """Sampled lanes drafting the argmax (--spec-draft argmax) beside a greedy one, through the graph batches: each
    verified row's next token and acceptance are computed on the device (picks.py) and the drafter's pass is
    queued before the host reads them. Every token equals the one the host-side rejection sampling
    (verify.accept, the same seeded uniforms and noise) gives when the early pass is off; rounds accept and
    reject; a lane drawing from q (penalties) keeps the step off the early pass."""
    from hinfer.engine.spec import mtp as mtp_mod
    from hinfer.engine.spec import picks as picks_mod

    cfg, model = small_model
    rng = random.Random(6)
    prompts = [[rng.randrange(1, 12) for _ in range(n)] for n in (4, 19, 33)]
    params = [SP(temperature=0.9, top_k=8, top_p=0.9, seed=1, max_tokens=40, ignore_eos=True),
              SP(temperature=1.0, top_k=20, seed=2, max_tokens=40, ignore_eos=True),
              SP(temperature=0, max_tokens=40, ignore_eos=True)]  # fmt: skip
    real_rows, real_picks = mtp_mod.MTPDrafter._early_rows, picks_mod.sampled_picks

    def run(early: bool, penalty: bool = False) -> tuple[dict, int, int, list]:
        used, judged = [], []

        def rows(self, jobs):
            h = real_rows(self, jobs)
            used.append(h is not None)
            return h

        def counted(*a, **kw):
            judged.append(1)
            return real_picks(*a, **kw)

        monkeypatch.setattr(mtp_mod.MTPDrafter, "_early_rows", rows)
        monkeypatch.setattr("hinfer.engine.spec.decoder.sampled_picks", counted)
        if not early:
            monkeypatch.setattr(mtp_mod.MTPDrafter, "prelaunch", lambda self, *a: False)
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=128, page_size=16, max_concurrency=3,
                                                       prefill_chunk=16, spec="mtp", draft_tokens=3,
                                                       spec_adaptive=False, spec_draft="argmax"))  # fmt: skip
        core = make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))
        core.runner.capture_graphs(3, core.ecfg.max_context, capture=False)
        core.spec.use_graphs(3, capture=False)
        ps = [replace(params[0], presence_penalty=0.5), params[2]] if penalty else params  # with the greedy lane
        got, _, _ = run_all(core, [GenerationRequest(f"r{i}", p, x) for i, (p, x) in enumerate(zip(prompts, ps))])
        assert_all_free(core)
        monkeypatch.undo()
        return got, sum(used), len(judged), core.spec.accept_hist

    with_early, used, judged, hist = run(True)
    without, unused, _, _ = run(False)
    assert with_early == without
    assert used > 5 and judged > 5 and unused == 0, (used, judged, unused)
    assert hist[0] > 0 and sum(hist[1:]) > 0, hist  # rounds that kept none of their drafts, and some that kept more
    _, used, judged, _ = run(True, penalty=True)
    assert judged == 0  # a lane with penalties draws its drafts from q: no step with it qualified


def test_a_lane_aborted_after_drafting_leaves_the_others_verifying_from_the_device(make_engine_core):
    """The drafter drafted for three lanes, the last is aborted before the verify step: the other two still
    take their drafts from the device (the round's rows past them are left out) and decode as plain decoding."""
    rng = random.Random(8)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (5, 12, 21)]
    params = SP(temperature=0, max_tokens=16, ignore_eos=True)
    plain, _, _ = run_all(make_engine_core(max_concurrency=3, prefill_chunk=32),
                          [GenerationRequest(f"r{i}", p, params) for i, p in enumerate(prompts[:2])])  # fmt: skip
    core = make_engine_core(max_concurrency=3, prefill_chunk=32, spec="mtp", draft_tokens=3, spec_adaptive=False)
    core.runner.capture_graphs(3, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(3, capture=False)
    for i, p in enumerate(prompts):
        core.add(GenerationRequest(f"r{i}", p, params))
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(3)}
    aborted = False
    while core.has_work:
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
        if not aborted and all(out.values()):  # every lane decoding, the next round drafted for all three
            core.abort("r2")
            aborted = True
    assert aborted and {k: out[k] for k in ("r0", "r1")} == plain
    assert_all_free(core)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "static-batches"])
def test_drafts_kept_on_the_device_equal_drafts_read_each_step(make_engine_core, monkeypatch, graphs):
    """Lanes without penalties or a thinking budget keep their drafts on the device between draft steps (one
    host read per round); the drafts, hence every output token and acceptance count, equal those of reading
    each step's tokens back (the path lanes with penalties take), for greedy and sampled lanes, K per lane."""
    from hinfer.engine.spec import mtp as mtp_mod

    rng = random.Random(11)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (3, 17, 9, 30)]
    params = [SP(temperature=0, max_tokens=14, ignore_eos=True), SP(temperature=0.8, seed=5, max_tokens=14,
              ignore_eos=True), SP(temperature=0, max_tokens=9, ignore_eos=True),
              SP(temperature=1.0, top_k=20, seed=7, max_tokens=14, ignore_eos=True)]  # fmt: skip
    runs = {}
    for device_path in (False, True):
        seen = Counter()

        def free(row, device_path=device_path, seen=seen):
            seen[device_path] += 1
            return device_path

        monkeypatch.setattr(mtp_mod, "prefix_free", free)
        core = make_engine_core(max_concurrency=4, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_draft_cost=0.3)
        if graphs:
            core.runner.capture_graphs(4, core.ecfg.max_context, capture=False)
            core.spec.use_graphs(4, capture=False)
        out = run_all(core, [GenerationRequest(f"r{i}", p, replace(params[i])) for i, p in enumerate(prompts)])[0]
        st = core.stats().extra
        runs[device_path] = (out, st["spec_drafted"], st["spec_accepted"])
        assert seen[device_path] > 0
        assert_all_free(core)
    assert runs[True] == runs[False]
    assert runs[True][1] > 0


def test_quantized_model_drafts_with_its_own_quantized_lm_head(tiny_model, tokenizer):
    """An int4 model's drafter gets an int4 lm_head copy (the bytes the memory plan counts); greedy output with
    speculation still equals plain decoding of the same int4 model."""
    import copy

    from hinfer.engine.weight_bytes import draft_head_bytes
    from hinfer.quant import Int4Weight, quantize_model

    cfg, model = tiny_model
    q = copy.deepcopy(model)
    quantize_model(q, "int4")

    def core(**kw):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=512, page_size=16, **kw))
        return make_core(cfg, q, tokenizer, ecfg, torch.device("cpu"))

    rng = random.Random(5)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (4, 19, 33)]
    params = [greedy_params(i) for i in range(3)]
    base, _, _ = run_all(core(max_concurrency=3, prefill_chunk=16),
                         [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)])  # fmt: skip
    spec = core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False)
    head = spec.spec.drafter.draft_head
    assert isinstance(head, Int4Weight) and tuple(head.shape) == tuple(model.lm_head.shape)
    assert sum(b.numel() * b.element_size() for b in head.buffers()) == draft_head_bytes(cfg, "int4", 4)
    got, _, _ = run_all(spec, [GenerationRequest(f"r{i}", p, params[i]) for i, p in enumerate(prompts)])
    assert got == base
    assert spec.stats().extra["spec_drafted"] > 0
    assert make_engine_core_plain_head(cfg, model, tokenizer) is None


@pytest.mark.parametrize("quantized", [False, True], ids=["fp32", "int4"])
def test_a_draft_vocabulary_drafts_only_its_ids_and_changes_no_output(tiny_model, tokenizer, quantized):
    """--spec-draft-vocab N: the drafter's head holds the first N rows (a view of an unquantized model's, a
    quantized copy of N rows otherwise, as many bytes as the plan counts), every draft is an id below N, and
    greedy output still equals plain decoding."""
    import copy

    from hinfer.engine.weight_bytes import draft_head_bytes
    from hinfer.quant import quantize_model

    cfg, model = tiny_model
    if quantized:
        model = copy.deepcopy(model)
        quantize_model(model, "int4")
    vocab = 256

    def core(**kw):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=512, page_size=16, **kw))
        return make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))

    rng = random.Random(7)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (4, 19, 33)]
    reqs = [GenerationRequest(f"r{i}", p, greedy_params(i)) for i, p in enumerate(prompts)]
    base, _, _ = run_all(core(max_concurrency=3, prefill_chunk=16), reqs)
    spec = core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_adaptive=False,
                spec_draft_vocab=vocab)  # fmt: skip
    drafter = spec.spec.drafter
    assert tuple(drafter.draft_head.shape) == (vocab, cfg.hidden_size)
    held = 0 if not quantized else sum(b.numel() * b.element_size() for b in drafter.draft_head.buffers())
    assert held == draft_head_bytes(cfg, "int4" if quantized else "bf16", 4, vocab)
    drafted = []
    draft = drafter.draft

    def recording(jobs):
        out = draft(jobs)
        drafted.extend(t for p in out if p is not None for t in p.settle())
        return out

    drafter.draft = recording
    got, _, _ = run_all(spec, reqs)
    assert got == base
    assert drafted and max(drafted) < vocab


def test_a_draft_vocabulary_is_a_multiple_of_64():
    from hinfer.errors import ConfigError

    EngineConfig(spec="mtp", spec_draft_vocab=32768).validate()
    for bad in (0, 100, 32):
        with pytest.raises(ConfigError, match="--spec-draft-vocab"):
            EngineConfig(spec="mtp", spec_draft_vocab=bad).validate()


def make_engine_core_plain_head(cfg, model, tokenizer):
    """A bf16/fp32 model's drafter shares the model's lm_head."""
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=512, page_size=16, spec="mtp"))
    return make_core(cfg, model, tokenizer, ecfg, torch.device("cpu")).spec.drafter.draft_head


def test_plain_rounds_feed_the_head_later_and_drafts_still_see_every_position(make_engine_core):
    """Adaptive speculation with drafts never accepted: lanes decode plainly, their positions wait for the head
    (up to K + 1 rows, then one pass) and each probe's draft is the head recomputed from scratch."""
    from hinfer.engine.spec.decoder import SpecDecoder

    rng = random.Random(9)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (3, 17, 30)]
    params = SP(temperature=0, max_tokens=40, ignore_eos=True)
    reqs = lambda: [GenerationRequest(f"r{i}", p, replace(params)) for i, p in enumerate(prompts)]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=3, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=3, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_draft_cost=0.3)
    peek = core.spec.drafter = peek_drafter(core.spec.drafter, base)
    peek.then = OracleDrafter(base, wrong=True)
    deferred, flushed = [0], [0]
    defer = SpecDecoder._defer_observations

    def counting(self, jobs):
        before = sum(len(j.seq.mtp_backlog) for j in jobs)
        out = defer(self, jobs)
        deferred[0] += len(jobs) - len(out)
        flushed[0] += before and sum(len(j.next_ids) > 1 for j in out)
        return out

    core.spec._defer_observations = counting.__get__(core.spec)
    assert run_all(core, reqs())[0] == base
    st = core.stats().extra
    assert st["spec_plain_steps"] > 2 * st["spec_verify_steps"] and st["spec_accepted"] == 0
    assert deferred[0] > 20 and flushed[0] > 5 and peek.checked >= 3  # probes checked against the head


def test_a_pass_that_only_feeds_the_head_skips_its_lm_head(make_engine_core, monkeypatch):
    """Plain-decoding lanes (drafts never accepted) feed their positions to the MTP head in batched passes that
    draft nothing: those passes take the head's graphs without the lm_head and argmax tail (a whole lm_head read
    per pass otherwise); the probes' passes, which draft, take the tail. Output equals plain decoding."""
    from hinfer.engine import cuda_graphs

    calls: Counter = Counter()
    real_run = cuda_graphs.StepGraphs.run

    def counting_run(self, chunks, hidden=None, ids=None, drafts=None, shift=None):
        if self.head == "mtp":
            drafting = any(c.need_logits for c in chunks)
            calls[("drafting" if drafting else "feeding", "tail" if self.tail is not None else "no tail")] += 1
        return real_run(self, chunks, hidden, ids, drafts, shift)

    monkeypatch.setattr(cuda_graphs.StepGraphs, "run", counting_run)
    rng = random.Random(5)
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (4, 19)]
    params = SP(temperature=0, max_tokens=40, ignore_eos=True)
    reqs = lambda: [GenerationRequest(f"r{i}", p, replace(params)) for i, p in enumerate(prompts)]  # noqa: E731
    base = run_all(make_engine_core(max_concurrency=2, prefill_chunk=16), reqs())[0]
    core = make_engine_core(max_concurrency=2, prefill_chunk=16, spec="mtp", draft_tokens=3, spec_draft_cost=0.3)
    core.runner.capture_graphs(2, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(2, capture=False)  # the head's graphs, before the peeking wrapper hides them
    core.spec.drafter = peek_drafter(core.spec.drafter, base)
    core.spec.drafter.then = OracleDrafter(base, wrong=True)
    assert run_all(core, reqs())[0] == base
    assert calls[("feeding", "no tail")] > 3 and calls[("feeding", "tail")] == 0, calls


def test_prefix_free_lanes():
    """Penalties and a thinking budget make a position's distribution depend on the drafted prefix."""
    from hinfer.engine.spec.mtp import prefix_free

    assert prefix_free(RowState(SP(temperature=0.7), seed=1))
    assert not prefix_free(RowState(SP(presence_penalty=0.5), seed=1))
    assert not prefix_free(RowState(SP(repetition_penalty=1.1), seed=1))
    assert not prefix_free(RowState(SP(thinking_budget=64, think_end_token_id=5), seed=1))
