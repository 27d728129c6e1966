"""Prompt logprobs through the engine against log_softmax of LLM.logits (a private full prefill)."""

from __future__ import annotations

import pytest
import torch

from hinfer.sampling_params import SamplingParams

# Same weights, same fp32 math, but chunked prefill and batching differ from one full prefill: sums reorder.
ATOL = 1e-3


@pytest.fixture(scope="module")
def llm():
    from hinfer import LLM

    return LLM("demo", max_concurrency=4, max_context=2048)


def _want(llm, ids: list[int]) -> list[float]:
    lp = torch.log_softmax(llm.logits(ids).float(), dim=-1)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


def test_prompt_logprobs_match_full_prefill(llm):
    short = llm.tokenizer.encode("The quick brown fox jumps over the lazy dog.")
    long = [(7 * i + 3) % 5000 + 100 for i in range(150)]  # more than one 64-token prompt chunk
    outs = llm.generate([short, long], SamplingParams(max_tokens=2, prompt_logprobs=2, seed=0))
    for ids, out in zip([short, long], outs):
        got = out.prompt_logprobs
        assert got is not None and len(got) == len(ids) and got[0] is None
        assert got[1:] == pytest.approx(_want(llm, ids), abs=ATOL)
        tops = out.events[0].prompt_top_logprobs
        assert tops[0] is None and all(len(t) == 2 and t[0].logprob >= t[1].logprob for t in tops[1:])


def test_prompt_logprobs_bypass_the_prefix_cache(llm):
    ids = [(11 * i + 5) % 3000 + 200 for i in range(200)]
    first = llm.generate([ids], SamplingParams(max_tokens=1, seed=0))[0]  # fills the cache
    again = llm.generate([ids], SamplingParams(max_tokens=1, seed=0))[0]
    scored = llm.generate([ids], SamplingParams(max_tokens=1, seed=0, prompt_logprobs=0))[0]
    assert first.cached_tokens == 0 and again.cached_tokens > 0
    assert scored.cached_tokens == 0 and len(scored.prompt_logprobs) == len(ids)
    assert scored.prompt_logprobs[1:] == pytest.approx(_want(llm, ids), abs=ATOL)
