"""Sampling parameters at the edges of their ranges: validation in the sampler's float32 arithmetic, and the
sampler never picks a padding id (rows beyond the tokenizer's vocabulary) nor reports a non-finite logprob."""

from __future__ import annotations

import math
import random

import pytest
import torch

from hinfer.engine.sampler import RowState, Sampler
from hinfer.sampling_params import InvalidSamplingParam
from hinfer.sampling_params import SamplingParams as SP

V, REAL = 96, 80  # 16 padding rows, as the real checkpoints pad 248,077 tokens to 248,320 rows

BAD = [
    ("temperature", dict(temperature=3.5e38)),
    ("temperature", dict(temperature=math.inf)),
    ("temperature", dict(temperature=math.nan)),
    ("temperature", dict(temperature=100.5)),
    ("repetition_penalty", dict(repetition_penalty=1e-45)),
    ("repetition_penalty", dict(repetition_penalty=0.0)),
    ("repetition_penalty", dict(repetition_penalty=1e39)),
    ("top_p", dict(top_p=math.nan)),
    ("min_p", dict(min_p=math.nan)),
    ("presence_penalty", dict(presence_penalty=math.inf)),
    ("frequency_penalty", dict(frequency_penalty=-2.5)),
    ("logit_bias", dict(logit_bias={3: math.inf})),
    ("top_k", dict(top_k=2**63)),
]


@pytest.mark.parametrize("param,kw", BAD, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD)])
def test_out_of_range_parameters_name_themselves(param, kw):
    with pytest.raises(InvalidSamplingParam) as e:
        SP(**kw).validate()
    assert e.value.param == param and param in str(e.value)


def test_tiny_temperatures_are_greedy():
    assert SP(temperature=1e-45).greedy and SP(temperature=0.0).greedy and not SP(temperature=1e-5).greedy


def _edge_params(rng: random.Random) -> SP:
    """Valid parameters, mostly at the ends of their ranges."""
    def pick(*vals):
        return rng.choice(vals)
    return SP(temperature=pick(0.0, 1e-45, 1e-5, 1.0, 99.9, 100.0), top_p=pick(1e-45, 1e-8, 0.5, 1.0),
              top_k=pick(-1, 0, 1, 5, 300, 2**31 - 1), min_p=pick(0.0, 5e-324, 0.5, 1.0),
              presence_penalty=pick(-2.0, 0.0, 2.0), frequency_penalty=pick(-2.0, 0.0, 2.0),
              repetition_penalty=pick(0.01, 1.0, 100.0), logit_bias=pick({}, {1: 100.0, 2: -100.0}),
              logprobs=pick(None, 0, 20))


@pytest.mark.parametrize("seed", range(6))
def test_edge_parameters_never_pick_padding_nor_report_non_finite_logprobs(seed):
    rng = random.Random(seed)
    print("seed", seed)
    params = [_edge_params(rng) for _ in range(8)]
    for p in params:
        p.validate()
    s = Sampler(V, "cpu", max_rows=8, num_real_tokens=REAL)
    rows = [RowState(p, seed=i, slot=i, prompt_ids=[1, 2, 3]) for i, p in enumerate(params)]
    for r in rows:
        s.add_row(r)
    gen = torch.Generator().manual_seed(seed)
    for step in range(4):
        logits = torch.randn(len(rows), V, generator=gen) * rng.choice([1.0, 30.0, 1e4])
        logits[:, REAL:] = 1e6  # padding rows that would win everything if they were not masked
        ids, lps, tops = s.sample(logits, rows).to_host(rows)
        assert all(0 <= t < REAL for t in ids), (step, ids, params)
        for p, lp, top in zip(params, lps, tops):
            if p.logprobs is None:
                continue
            assert lp is not None and math.isfinite(lp)
            assert all(0 <= t.token_id < REAL and math.isfinite(t.logprob) for t in top)
        s.update(rows, ids)
