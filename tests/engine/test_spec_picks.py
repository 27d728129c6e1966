"""The device-side judgement of sampled lanes' rows (engine/spec/picks.py) against host-side rejection sampling
(spec/verify.accept over whole-vocabulary rows, the same seeded uniforms and noise)."""

from __future__ import annotations

import torch

from hinfer.engine.sampler import RowState, Sampler, vocab_gamma
from hinfer.engine.spec.dist import (
    ACCEPT,
    RESAMPLE,
    Position,
    processed_logits,
    racer,
    sampling_probs,
    spec_keys,
    uniforms,
)
from hinfer.engine.spec.picks import draws_among_candidates, sampled_picks
from hinfer.engine.spec.verify import accept
from hinfer.sampling_params import SamplingParams as SP

V = 600  # more ids than candidates: the top-k path
PARAMS = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=0.7, top_k=256, min_p=0.05),
          SP(temperature=1.3, top_k=3), SP(temperature=1.0, top_k=50, top_p=0.5)]  # fmt: skip


def test_rows_judged_one_by_one_give_rejection_samplings_tokens():
    """For every lane and round: the accepted count is the leading run of accepted rows, and the token after it is
    that row's pick, exactly as verify.accept decides on the whole-vocabulary rows. Drafts are the row's argmax,
    its second choice or a token outside its candidates, so rounds end at every position."""
    t = 4
    sampler = Sampler(V, "cpu", max_rows=len(PARAMS), num_real_tokens=V - 40)  # padding ids past the real ones
    gamma = vocab_gamma(V, torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    lengths = []
    for rnd in range(60):
        rows = [RowState(x, seed=11 + i, slot=i, num_generated=rnd * 3 + i) for i, x in enumerate(PARAMS)]
        lanes = [Position(r) for r in rows]
        assert all(map(draws_among_candidates, lanes))
        logits = torch.randn(len(rows) * t, V, generator=g) * 2.5
        top2 = torch.topk(logits, 2, dim=-1).indices
        kind = torch.randint(0, 3, (len(rows) * t,), generator=g)
        far = torch.randint(0, V, (len(rows) * t,), generator=g)
        drafts = torch.where(kind == 0, top2[:, 0], torch.where(kind == 1, top2[:, 1], far)).view(len(rows), t)
        drafts[:, -1] = -1
        picks, ok = sampled_picks(sampler, logits, lanes, drafts.view(-1), t, gamma)

        positions = [Position(r, drafts[i, :j].tolist()) for i, r in enumerate(rows) for j in range(t)]
        p = sampling_probs(processed_logits(sampler, logits, positions), positions).view(len(rows), t, V)
        d = drafts[:, : t - 1]
        q = torch.nn.functional.one_hot(d, V).float()
        firsts = [(r.seed, r.num_generated) for r in rows]
        u = uniforms(spec_keys([(s, n + j) for s, n in firsts for j in range(t - 1)], ACCEPT, torch.device("cpu")))
        a, last = accept(p, q, d, torch.full((len(rows),), t - 1), u.view(len(rows), t - 1),
                         racer(firsts, RESAMPLE, gamma, True))  # fmt: skip
        ok, picks = ok.view(len(rows), t), picks.view(len(rows), t)
        for i in range(len(rows)):
            lead = 0
            while lead < t - 1 and ok[i, lead]:
                lead += 1
            assert lead == a[i], (rnd, i)
            assert picks[i, lead] == last[i], (rnd, i)
            assert torch.equal(picks[i, :lead], d[i, :lead])
            lengths.append(lead)
    assert set(lengths) == {0, 1, 2, 3}, sorted(set(lengths))


def test_what_is_not_judged_on_the_device():
    """Greedy lanes, a top_k over the candidates or none, penalties, bias, a grammar or thinking budget, logprobs."""
    yes = SP(temperature=1.0, top_k=20)
    assert draws_among_candidates(Position(RowState(yes, seed=1)))
    for x in (SP(temperature=0), SP(temperature=1.0), SP(temperature=1.0, top_k=300),
              SP(temperature=1.0, top_k=20, presence_penalty=0.5), SP(temperature=1.0, top_k=20, logit_bias={3: 1.0}),
              SP(temperature=1.0, top_k=20, thinking_budget=4, think_end_token_id=5),
              SP(temperature=1.0, top_k=20, logprobs=2)):  # fmt: skip
        assert not draws_among_candidates(Position(RowState(x, seed=1))), x
    assert not draws_among_candidates(Position(RowState(yes, seed=1, grammar=object())))
