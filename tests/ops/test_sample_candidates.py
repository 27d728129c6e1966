"""The sampler's candidate path in one Triton launch (ops/triton/sample_candidates.py) against its torch body
(Sampler._sample_candidates): the same token in every row, over top_k / top_p / min_p / temperature mixes, rows
full of ties, and many steps (the noise is keyed by the step)."""

from __future__ import annotations

import torch

from hinfer.engine.sampler import CANDIDATES, RowState, Sampler
from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.sample_candidates import sample_candidates
from hinfer.sampling_params import SamplingParams as SP

PARAMS = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=0.7, top_k=5), SP(temperature=1.3, top_k=256,
          top_p=0.5, min_p=0.05), SP(temperature=0.5, top_k=1), SP(temperature=2.0, top_k=64, min_p=0.2),
          SP(temperature=1.0, top_k=40, top_p=0.8)]  # fmt: skip


def test_one_launch_samples_as_the_torch_body(interpreter) -> None:
    seed = fixed_test_seed()
    g = torch.Generator().manual_seed(seed)
    vocab = 700
    sampler = Sampler(vocab, torch.device("cpu"), max_rows=len(PARAMS))
    rows = [RowState(p, seed=31 * i + seed, slot=i) for i, p in enumerate(PARAMS)]
    for r in rows:
        sampler.add_row(r)
    differ = []
    for step in range(40):
        z = torch.randn(len(rows), vocab, generator=g) * 3
        if step % 4 == 0:  # whole rows of ties at the top-k and top-p boundaries
            z = z.round()
        fpar, ipar = sampler._params(rows, z.device)
        zt = z / fpar[:, 0:1]
        want = sampler._sample_candidates(zt, ipar[:, 0], ipar[:, 1], fpar[:, 1:2], fpar[:, 2:3], PARAMS)
        vals, ids = torch.topk(zt, min(CANDIDATES, vocab), dim=-1)
        got = sample_candidates(vals, ids, ipar[:, 0], ipar[:, 1], fpar[:, 1:2], fpar[:, 2:3], True, True)
        differ += [(step, i) for i in (got != want).nonzero().flatten().tolist()]
        for r in rows:
            r.num_generated += 1
    assert not differ, differ


def test_one_launch_judges_verified_rows_as_the_torch_body(interpreter) -> None:
    """The speculative form (judge_candidates): each verified row's draft accepted where u < p(draft), else the
    race without it, the bonus rows (no draft) a plain race: the torch body's picks and acceptance in every row.
    Drafts are the row's top candidate, its second, a token outside its candidates or none; u spans (0, 1)."""
    from hinfer.engine.sampler import vocab_gamma
    from hinfer.engine.spec.picks import judge_candidates_ref
    from hinfer.ops.triton.sample_candidates import judge_candidates

    seed = fixed_test_seed()
    g = torch.Generator().manual_seed(seed)
    vocab, n = 700, len(PARAMS)
    sampler = Sampler(vocab, torch.device("cpu"), max_rows=n)
    rows = [RowState(p, seed=17 * i + seed, slot=i) for i, p in enumerate(PARAMS)]
    gamma = vocab_gamma(vocab, torch.device("cpu"))
    differ, kept = [], 0
    for step in range(40):
        z = torch.randn(n, vocab, generator=g) * 3
        fpar, ipar = sampler._params(rows, z.device)
        vals, ids = torch.topk(z / fpar[:, 0:1], min(CANDIDATES, vocab), dim=-1)
        kind = torch.randint(0, 4, (n,), generator=g)
        drafts = torch.stack([ids[:, 0], ids[:, 1], ids[:, -1] * 0 + vocab - 1 - step, torch.full((n,), -1)])
        drafts = drafts.gather(0, kind[None, :])[0]
        u = torch.rand(n, generator=g, dtype=torch.float64)
        want = judge_candidates_ref(vals, ids, ipar[:, 0], ipar[:, 1], fpar[:, 1:2], fpar[:, 2:3], PARAMS, drafts, u,
                                    gamma)  # fmt: skip
        got = judge_candidates(vals, ids, ipar[:, 0], ipar[:, 1], fpar[:, 1:2], fpar[:, 2:3], True, True, drafts, u)
        differ += [(step, i) for i in ((got[0] != want[0]) | (got[1] != want[1])).nonzero().flatten().tolist()]
        kept += int(want[1].sum())
        for r in rows:
            r.num_generated += 1
    assert not differ, differ
    assert 0 < kept < 40 * n  # both outcomes
