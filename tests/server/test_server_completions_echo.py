"""/v1/completions prompt scoring (echo + logprobs, max_tokens 0: lm-evaluation-harness's loglikelihood), lists of
prompts and n > 1; chat n > 1. On the demo model through the real engine."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

# The server's prefill is chunked and batched differently from LLM.logits' one full prefill: fp32 sums reorder.
ATOL = 1e-3


@pytest.fixture(scope="module")
def oai(demo_url):
    return openai.OpenAI(base_url=demo_url + "/v1", api_key="x", max_retries=0)


def test_echo_logprobs_score_the_prompt(oai, demo_llm):
    llm = demo_llm
    text = "The capital of France is Paris."
    ids = llm.tokenizer.encode(text)
    want = torch.log_softmax(llm.logits(ids).float(), dim=-1)
    r = oai.completions.create(model="demo", prompt=text, max_tokens=0, echo=True, logprobs=1)
    c = r.choices[0]
    assert c.text == text and c.finish_reason == "length" and r.usage.completion_tokens == 0
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx([want[i - 1, ids[i]].item() for i in range(1, len(ids))],
                                                  abs=ATOL)
    assert "".join(lp.tokens) == text and lp.text_offset[1] == len(lp.tokens[0])
    top = lp.top_logprobs[1]
    assert len(top) == 1 and max(top.values()) >= lp.token_logprobs[1] - ATOL


def test_echo_logprobs_then_generation(oai):
    r = oai.completions.create(model="demo", prompt=[1000, 2000, 3000], max_tokens=3, echo=True, logprobs=0,
                               temperature=0, stream=False)
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == 3 + r.usage.completion_tokens and lp.token_logprobs[0] is None
    assert all(x is not None for x in lp.token_logprobs[1:])


def test_list_of_prompts_and_n(oai):
    r = oai.completions.create(model="demo", prompt=["one", "two"], n=2, max_tokens=4, seed=7, temperature=1.0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert 0 < r.usage.completion_tokens <= 16  # 4 choices of at most 4 tokens
    again = oai.completions.create(model="demo", prompt=["one", "two"], n=2, max_tokens=4, seed=7,
                                   temperature=1.0)
    assert [c.text for c in r.choices] == [c.text for c in again.choices]  # seeded: choice j uses seed + j
    s = oai.completions.create(model="demo", prompt=["one", "two"], n=2, max_tokens=4, seed=7, temperature=1.0,
                               stream=True)
    texts = ["", "", "", ""]
    finished = set()
    for chunk in s:
        for c in chunk.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    assert texts == [c.text for c in r.choices] and finished == {0, 1, 2, 3}


def test_chat_n(oai):
    msgs = [{"role": "user", "content": "hi"}]
    r = oai.chat.completions.create(model="demo", messages=msgs, n=3, max_tokens=5, seed=1,
                                    reasoning_effort="none")
    assert [c.index for c in r.choices] == [0, 1, 2] and len({c.message.content for c in r.choices}) > 1
    s = oai.chat.completions.create(model="demo", messages=msgs, n=3, max_tokens=5, seed=1, stream=True,
                                    reasoning_effort="none", stream_options={"include_usage": True})
    texts, usage = ["", "", ""], None
    for chunk in s:
        usage = chunk.usage or usage
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == [c.message.content for c in r.choices]
    assert usage.completion_tokens == r.usage.completion_tokens


def test_chat_prompt_logprobs(oai, demo_llm, demo_url):
    """vLLM's `prompt_logprobs` on a chat: the rendered prompt's tokens scored as LLM.logits scores them, each
    with its rank and the n likeliest tokens; refused when streaming
    or out of [0, 20]."""
    messages = [{"role": "user", "content": "Name a colour."}]
    r = oai.chat.completions.create(model="demo", messages=messages, max_tokens=2, temperature=0, n=2,
                                    extra_body={"prompt_logprobs": 2})  # fmt: skip
    plp = r.model_extra["prompt_logprobs"]
    ids = httpx.post(f"{demo_url}/tokenize", json={"model": "demo", "messages": messages}).json()["tokens"]
    assert plp[0] is None and len(plp) == len(ids) == r.usage.prompt_tokens
    assert [int(next(iter(e))) for e in plp[1:]] == ids[1:]
    for entry in plp[1:]:
        own = next(iter(entry.values()))  # the prompt's own token first
        assert own["logprob"] <= 0 and isinstance(own["decoded_token"], str)
        ranks = sorted((v["rank"], v["logprob"]) for v in entry.values())
        assert [r for r, _ in ranks] == ([1, 2] if own["rank"] <= 2 else [1, 2, own["rank"]])
        assert all(a[1] >= b[1] for a, b in zip(ranks, ranks[1:]))  # likelier first
    want = torch.log_softmax(demo_llm.logits(ids).float(), dim=-1)
    got = [next(iter(e.values())) for e in plp[1:]]
    assert [g["logprob"] for g in got] == pytest.approx([want[i - 1, ids[i]].item() for i in range(1, len(ids))],
                                                        abs=ATOL)  # fmt: skip
    for i, g in enumerate(got, start=1):  # the rank among the reference's logprobs, up to near ties
        row, lp = want[i - 1], want[i - 1, ids[i]].item()
        assert int((row > lp + ATOL).sum()) + 1 <= g["rank"] <= int((row > lp - ATOL).sum()) + 1
    plain = oai.chat.completions.create(model="demo", messages=messages, max_tokens=2, temperature=0)
    assert "prompt_logprobs" not in (plain.model_extra or {})
    for extra, stream in (({"prompt_logprobs": 21}, False), ({"prompt_logprobs": -1}, False),
                          ({"prompt_logprobs": 1}, True)):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(model="demo", messages=messages, max_tokens=2, stream=stream, extra_body=extra)
        assert e.value.body["param"] == "prompt_logprobs"
