"""The batched sampler: semantics against per-row references, filters, reproducibility, logprobs, thinking budget."""

from __future__ import annotations

import math
import random

import pytest
import torch

from hinfer.engine.sampler import (
    CANDIDATES,
    GAMMA,
    RowState,
    Sampler,
    _s64,
    gumbel_noise,
    mix64,
    mix64_py,
    row_key,
    vocab_gamma,
)
from hinfer.sampling_params import SamplingParams as SP

V = 64


def rows_for(params: list[SP], seeds: list[int] | None = None, prompts: list[list[int]] | None = None) -> list[RowState]:
    seeds = seeds or list(range(len(params)))
    prompts = prompts or [[] for _ in params]
    return [RowState(p, seed=s, slot=i, prompt_ids=pr) for i, (p, s, pr) in enumerate(zip(params, seeds, prompts))]


def test_mix64_matches_python_reference():
    vals = [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x0123456789ABCDEF, *(random.Random(0).getrandbits(64) for _ in range(50))]
    got = mix64(torch.tensor([_s64(v) for v in vals], dtype=torch.int64)).tolist()
    assert [g & (2**64 - 1) for g in got] == [mix64_py(v) for v in vals]


def test_noise_is_a_pure_function_of_key_and_id():
    g = vocab_gamma(V, "cpu")
    keys = torch.tensor([_s64(row_key(s, t)) for s, t in [(1, 0), (1, 1), (2, 0)]], dtype=torch.int64)
    full = gumbel_noise(keys, g[None, :])
    ids = torch.tensor([[5, 0, 63], [7, 7, 1], [2, 3, 4]])
    assert torch.equal(gumbel_noise(keys, g[ids]), full.gather(1, ids))
    assert torch.equal(gumbel_noise(keys[1:2], g[None, :]), full[1:2])
    assert torch.isfinite(full).all() and not torch.equal(full[0], full[1])
    assert g[1].item() == _s64(2 * GAMMA)


def test_greedy_is_argmax_lowest_id_on_ties():
    logits = torch.randn(3, V)
    logits[1, 10] = logits[1, 20] = logits[1].max() + 1
    s = Sampler(V, "cpu", max_rows=4)
    out = s.sample(logits, rows_for([SP(temperature=0.0)] * 3))
    assert out.token_ids.tolist() == [int(logits[0].argmax()), 10, int(logits[2].argmax())]
    assert out.logprobs is None


def _reference_processed(z: torch.Tensor, p: SP, prompt: list[int], output: list[int]) -> torch.Tensor:
    z = z.tolist()
    for t, b in p.logit_bias.items():
        z[t] += b
    counts = [output.count(t) for t in range(V)]
    for t in range(V):
        if t in prompt or counts[t] > 0:
            z[t] = z[t] / p.repetition_penalty if z[t] > 0 else z[t] * p.repetition_penalty
        z[t] = z[t] - p.frequency_penalty * counts[t] - p.presence_penalty * (1.0 if counts[t] > 0 else 0.0)
    return torch.tensor(z, dtype=torch.float32)


def test_bias_and_penalties_match_per_row_reference():
    torch.manual_seed(1)
    params = [
        SP(temperature=0.0, logit_bias={3: 5.0, 7: -100.0}),
        SP(temperature=0.0, repetition_penalty=1.3),
        SP(temperature=0.0, presence_penalty=1.5),
        SP(temperature=0.0, frequency_penalty=0.7),
        SP(temperature=0.0, repetition_penalty=0.8, presence_penalty=-0.5, frequency_penalty=0.3, logit_bias={1: 2.0}),
        SP(temperature=0.0),
    ]
    prompts = [[1, 2, 3], [4, 5, 6, 6], [7], [8, 9], [10, 11, 1], [12]]
    rows = rows_for(params, prompts=prompts)
    s = Sampler(V, "cpu", max_rows=8)
    for r in rows:
        s.add_row(r)
    outputs: list[list[int]] = [[] for _ in rows]
    for _step in range(4):  # generate some tokens so counts are non-trivial (include repeats)
        new = [[random.Random(i + 10 * _step).randrange(V) for _ in range(2)] for i in range(len(rows))]
        s.update(rows, new)
        for o, n in zip(outputs, new):
            o.extend(n)
    logits = torch.randn(len(rows), V) * 4
    got = s.processed_logits(logits, rows)
    for i, r in enumerate(rows):
        ref = _reference_processed(logits[i], r.params, prompts[i], outputs[i])
        assert torch.allclose(got[i], ref, rtol=1e-5, atol=1e-5)
    out = s.sample(logits, rows)
    assert out.token_ids.tolist() == got.argmax(-1).tolist()
    assert [r.num_generated for r in rows] == [8] * len(rows)


def test_add_row_resets_slot_state():
    s = Sampler(V, "cpu", max_rows=2)
    r = RowState(SP(temperature=0, presence_penalty=2.0), seed=0, slot=1)
    s.add_row(r)
    s.update([r], [5])
    assert s.counts[1, 5] == 1
    s.add_row(RowState(SP(temperature=0, presence_penalty=2.0), seed=0, slot=1))
    assert s.counts[1].sum() == 0
    with pytest.raises(ValueError):
        s.add_row(RowState(SP(), seed=0, slot=2))
    with pytest.raises(ValueError):
        s.add_row(RowState(SP(logit_bias={V: 1.0}), seed=0, slot=0))


def _allowed_and_probs(z: torch.Tensor, p: SP) -> tuple[set[int], torch.Tensor]:
    """Per-row reference of temperature -> top_k -> top_p -> min_p (sorted-list arithmetic in float64)."""
    v = z.shape[0]
    zt = [x / p.temperature for x in z.double().tolist()]
    order = sorted(range(v), key=lambda i: (-zt[i], i))
    keep = set(range(v))
    if p.top_k > 0:
        kth = zt[order[min(p.top_k, v) - 1]]
        keep = {i for i in keep if zt[i] >= kth}
    if p.top_p < 1.0:
        total = sum(math.exp(zt[i]) for i in keep)
        mass, last = 0.0, None
        for i in order:
            if i in keep and mass < p.top_p:
                last = zt[i]
                mass += math.exp(zt[i]) / total
        keep = {i for i in keep if zt[i] >= last}
    if p.min_p > 0:
        zmax = max(zt[i] for i in keep)
        keep = {i for i in keep if math.exp(zt[i] - zmax) >= p.min_p}
    w = torch.tensor([math.exp(zt[i]) if i in keep else 0.0 for i in range(v)], dtype=torch.float64)
    return keep, w / w.sum()


@pytest.mark.parametrize("p,v,scale", [
    (SP(temperature=1.0), V, 1.5),
    (SP(temperature=0.7, top_k=5), V, 1.5),
    (SP(temperature=1.3, top_p=0.6), V, 1.5),
    # top_k above the fast path's width: the full-vocabulary path, top_k and top_p both binding
    (SP(temperature=1.0, top_k=CANDIDATES + 20, top_p=0.995), 400, 0.2),
    (SP(temperature=1.0, min_p=0.2), V, 1.5),
    (SP(temperature=0.9, top_k=12, top_p=0.9, min_p=0.05), V, 1.5),
], ids=["plain", "top_k", "top_p", "big_top_k", "min_p", "all"])
def test_filters_keep_the_allowed_set_and_distribution(p, v, scale):
    torch.manual_seed(2)
    z = torch.randn(v) * scale
    n = 3000
    s = Sampler(v, "cpu", max_rows=1)
    rows = [RowState(p, seed=1000 + i, slot=0) for i in range(n)]  # n independent draws: different seeds
    toks = s.sample(z.expand(n, v).contiguous(), rows).token_ids.tolist()
    allowed, probs = _allowed_and_probs(z, p)
    assert set(toks) <= allowed
    if p.top_k > CANDIDATES:
        assert CANDIDATES < len(allowed) < p.top_k  # both filters bind, beyond the fast path
    counts = torch.bincount(torch.tensor(toks), minlength=v).double()
    expected = probs * n
    big = expected >= 5  # chi-square over the well-populated cells, the rest pooled
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    chi2 = (((obs - exp) ** 2) / exp).sum().item()
    df = max(1, len(obs) - 1)
    assert chi2 < df + 5 * math.sqrt(2 * df), (chi2, df)


def test_candidate_path_equals_full_vocabulary_race():
    """A top_k row samples among its 256 largest logits: the same token as the race over the whole vocabulary."""
    v = 1000
    torch.manual_seed(3)
    logits = torch.randn(16, v)
    s = Sampler(v, "cpu", max_rows=16)
    rows = [RowState(SP(temperature=0.8, top_k=40), seed=i, slot=i) for i in range(16)]
    got = s.sample(logits, rows).token_ids
    zt = logits / 0.8
    kth = zt.topk(40, dim=-1).values[:, -1:]
    zt = torch.where(zt >= kth, zt, -math.inf)
    keys = torch.tensor([_s64(row_key(i, 0)) for i in range(16)], dtype=torch.int64)
    ref = (zt + gumbel_noise(keys, vocab_gamma(v, "cpu")[None, :])).argmax(-1)
    assert torch.equal(got, ref)


def _row_logits(row_id: int, step: int, v: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(row_id * 1000 + step)
    return torch.randn(v, generator=g) * 2


def _generate(s: Sampler, rows: list[RowState], ids: list[int], steps: int, v: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {i: [] for i in ids}
    for r in rows:
        s.add_row(r)
    for step in range(steps):
        logits = torch.stack([_row_logits(i, step, v) for i in ids])
        toks = s.sample(logits, rows).token_ids.tolist()
        s.update(rows, toks)
        for i, t in zip(ids, toks):
            out[i].append(t)
    return out


def test_same_seed_same_tokens_regardless_of_batch():
    v = 512
    params = [
        SP(temperature=0.0),
        SP(temperature=1.0, seed=7),
        SP(temperature=0.8, top_k=20, top_p=0.95),
        SP(temperature=1.1, top_p=0.7),
        SP(temperature=0.9, min_p=0.1, presence_penalty=0.8, repetition_penalty=1.2),
        SP(temperature=1.0, top_k=300, frequency_penalty=0.5, logit_bias={3: 4.0}),
    ]
    seeds = [11, 7, 13, 17, 19, 23]

    def make(order: list[int]) -> list[RowState]:
        return [RowState(params[i], seed=seeds[i], slot=j, prompt_ids=[i, i + 1]) for j, i in enumerate(order)]

    steps = 6
    alone = {i: _generate(Sampler(v, "cpu", max_rows=8), make([i]), [i], steps, v)[i] for i in range(len(params))}
    order = [5, 2, 0, 4, 1, 3]
    together = _generate(Sampler(v, "cpu", max_rows=8), make(order), order, steps, v)
    assert together == alone
    pair = _generate(Sampler(v, "cpu", max_rows=8), make([3, 1]), [3, 1], steps, v)
    assert pair == {3: alone[3], 1: alone[1]}


def test_different_seeds_differ():
    s = Sampler(V, "cpu", max_rows=2)
    rows = [RowState(SP(temperature=1.0), seed=1, slot=0), RowState(SP(temperature=1.0), seed=2, slot=1)]
    seqs: list[list[int]] = [[], []]
    z = torch.zeros(2, V)  # uniform: only the noise decides
    for _ in range(20):
        toks = s.sample(z, rows).token_ids.tolist()
        s.update(rows, toks)
        for q, t in zip(seqs, toks):
            q.append(t)
    assert seqs[0] != seqs[1]
    assert len(set(seqs[0])) > 10  # and each seed's stream moves with the step


def test_logprobs_match_log_softmax_of_processed_logits():
    torch.manual_seed(4)
    params = [SP(temperature=0.7, logprobs=3, presence_penalty=1.0), SP(temperature=0.0, logprobs=0),
              SP(temperature=1.0), SP(temperature=1.0, top_k=5, logprobs=5, logit_bias={0: 3.0})]
    rows = rows_for(params, prompts=[[1], [2], [3], [4]])
    s = Sampler(V, "cpu", max_rows=4)
    for r in rows:
        s.add_row(r)
    s.update(rows, [[1, 1], [2], [3], [4]])
    logits = torch.randn(4, V) * 3
    ref = torch.log_softmax(s.processed_logits(logits, rows), dim=-1)
    out = s.sample(logits, rows)
    tok = out.token_ids
    assert torch.allclose(out.logprobs, ref.gather(1, tok[:, None])[:, 0], atol=1e-5)
    assert out.top_ids.shape == (4, 5)
    assert torch.allclose(out.top_logprobs, ref.topk(5, dim=-1).values, atol=1e-5)
    assert torch.equal(out.top_ids, ref.topk(5, dim=-1).indices)
    ids, lps, tops = out.to_host(rows)
    assert ids == tok.tolist()
    assert lps[2] is None and tops[2] is None
    assert tops[1] == [] and len(tops[0]) == 3 and len(tops[3]) == 5
    assert tops[3][0].token_id == int(ref[3].argmax()) and tops[3][0].logprob == pytest.approx(ref[3].max().item())


def test_padding_ids_never_sampled():
    s = Sampler(V, "cpu", max_rows=1, num_real_tokens=V - 8)
    z = torch.zeros(200, V)
    z[:, -8:] = 50.0
    rows = [RowState(SP(temperature=1.0), seed=i, slot=0) for i in range(200)]
    assert max(s.sample(z, rows).token_ids.tolist()) < V - 8


def test_thinking_budget_forces_end_token_exactly_at_budget():
    end = 9
    s = Sampler(V, "cpu", max_rows=3)
    z = torch.zeros(3, V)
    z[:, 1] = 10.0  # the model wants token 1 forever
    rows = rows_for([SP(temperature=0.0, thinking_budget=3, think_end_token_id=end, logprobs=0),
                     SP(temperature=1.0, top_k=1, thinking_budget=0, think_end_token_id=end),
                     SP(temperature=0.0, thinking_budget=None, think_end_token_id=end)])
    seqs: list[list[int]] = [[], [], []]
    for _ in range(6):
        out = s.sample(z, rows)
        toks = out.token_ids.tolist()
        s.update(rows, toks)
        for q, t in zip(seqs, toks):
            q.append(t)
    assert seqs[0] == [1, 1, 1, end, 1, 1]
    assert seqs[1] == [end, 1, 1, 1, 1, 1]
    assert seqs[2] == [1] * 6
    assert rows[0].think_ended and rows[1].think_ended and not rows[2].think_ended


def test_thinking_budget_not_forced_after_end_was_sampled():
    end = 9
    s = Sampler(V, "cpu", max_rows=1)
    row = RowState(SP(temperature=0.0, thinking_budget=2, think_end_token_id=end), seed=0, slot=0)
    seq = []
    for step in range(5):
        z = torch.zeros(1, V)
        z[0, end if step == 0 else 1] = 10.0  # </think> comes on its own at step 0
        t = s.sample(z, [row]).token_ids.tolist()
        s.update([row], t)
        seq += t
    assert seq == [end, 1, 1, 1, 1]


def test_forced_token_logprob_is_reported_as_computed():
    end = 9
    s = Sampler(V, "cpu", max_rows=1)
    row = RowState(SP(temperature=0.0, thinking_budget=0, think_end_token_id=end, logprobs=1), seed=0, slot=0)
    z = torch.randn(1, V)
    out = s.sample(z, [row])
    assert out.token_ids.item() == end
    assert out.logprobs.item() == pytest.approx(torch.log_softmax(z, -1)[0, end].item(), abs=1e-6)


def test_speculative_update_counts_every_accepted_token():
    s = Sampler(V, "cpu", max_rows=1)
    row = RowState(SP(temperature=0.0, frequency_penalty=1.0), seed=0, slot=0)
    s.add_row(row)
    s.update([row], [[4, 4, 5]])
    assert row.num_generated == 3
    assert s.counts[0, 4] == 2 and s.counts[0, 5] == 1
