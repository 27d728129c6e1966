"""lm-evaluation-harness's `local-completions` model on tiny inline tasks (multiple choice, and rolling
loglikelihood as perplexity tasks use), against the demo model: every loglikelihood it reports (from
`/v1/completions` with echo and logprobs) is checked against the prompt logprobs that `LLM.logits` computes, and
so are its greedy flags and its accuracy. Twice: with the packaged tokenizer (`tokenizer_backend=huggingface`), and
with lm-eval's default, which finds the server's tokenizer endpoints and tokenizes through them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from hinfer import LLM
    from hinfer.tokenizer import Tokenizer

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed")

# The server's prefill is chunked and batched differently from LLM.logits' one full prefill: fp32 sums reorder.
ATOL_PER_TOKEN = 1e-3
# Choices carry their own leading space (the task's target_delimiter is empty), so a choice can be any text.
DOCS = [
    {"question": "The capital of France is", "choices": [" Paris", " Rome", " a large green fish"], "answer": 0},
    {"question": "Two plus two equals", "choices": [" four", " five"], "answer": 0},
    {"question": "Water boils at 100 degrees", "choices": [" Celsius.", " Fahrenheit.", " Kelvin."], "answer": 0},
]


def split_pair(tokenizer: Tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's own split: trailing spaces of the context move to the continuation; the continuation's tokens
    are those of the whole text after the context's."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole, ctx = tokenizer.encode(context + continuation), tokenizer.encode(context)
    return ctx, whole[len(ctx):]


def score(llm: LLM, context: str, continuation: str) -> tuple[float, bool]:
    ctx, cont = split_pair(llm.tokenizer, context, continuation)
    ids = ctx + cont
    logp = torch.log_softmax(llm.logits(ids).float(), dim=-1)
    rows = range(len(ctx) - 1, len(ids) - 1)  # the row before each continuation token predicts it
    total = sum(logp[r, ids[r + 1]].item() for r in rows)
    greedy = all(int(logp[r].argmax()) == ids[r + 1] for r in rows)
    return total, greedy


def rolling_score(llm: LLM, text: str) -> float:
    """The whole text's loglikelihood after one prefix token: lm-eval's tokenizer's eos (`<|im_end|>` here)."""
    ids = [llm.tokenizer.token_to_id("<|im_end|>"), *llm.tokenizer.encode(text)]
    logp = torch.log_softmax(llm.logits(ids).float(), dim=-1)
    return sum(logp[i, ids[i + 1]].item() for i in range(len(ids) - 1))


def greedy_doc(llm: LLM) -> dict:
    """A question whose first choice is the model's own two greedy tokens, so the greedy flag is checked both
    ways. The first context whose greedy text re-tokenizes to the same ids is taken."""
    for context in ("Once upon a time", "The weather today", "In the beginning", "Hello world"):
        ctx = llm.tokenizer.encode(context)
        ids = list(ctx)
        for _ in range(2):
            ids.append(int(llm.logits(ids)[-1].argmax()))
        text = llm.tokenizer.decode(ids[len(ctx):])
        if split_pair(llm.tokenizer, context, text) == (ctx, ids[len(ctx):]):
            return {"question": context, "choices": [text, " and then nothing"], "answer": 0}
    raise AssertionError("no context's greedy continuation survives re-tokenizing")


def tasks(tmp_path: Path, docs: list[dict]) -> list[dict]:
    """A multiple-choice task and a rolling-loglikelihood one over the same inline documents."""
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    rolling = {"task": "hinfer_rolling", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
               "test_split": "test", "output_type": "loglikelihood_rolling", "doc_to_text": "",
               "doc_to_target": "{{question}}", "metric_list": [{"metric": "word_perplexity"}]}
    task = {"task": "hinfer_tiny", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
            "test_split": "test", "output_type": "multiple_choice", "target_delimiter": "", "doc_to_text": "{{question}}",
            "doc_to_choice": "{{choices}}", "doc_to_target": "{{answer}}",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    return [task, rolling]


def check_scores(out: dict, docs: list[dict], demo_llm: LLM) -> None:
    """Every reported loglikelihood and greedy flag against LLM.logits, and the accuracy they give."""
    samples = sorted(out["samples"]["hinfer_tiny"], key=lambda s: s["doc_id"])
    assert len(samples) == len(docs)
    correct = []
    greedy_flags = []
    for s in samples:
        got = [r[0] for r in s["resps"]]  # one (loglikelihood, is_greedy) per choice
        want = [score(demo_llm, ctx, cont) for ctx, cont in s["arguments"]]
        for (g, g_greedy), (w, w_greedy), (ctx, cont) in zip(got, want, s["arguments"]):
            n = len(split_pair(demo_llm.tokenizer, ctx, cont)[1])
            assert g == pytest.approx(w, abs=ATOL_PER_TOKEN * n), (ctx, cont)
            assert g_greedy == w_greedy, (ctx, cont)
            greedy_flags.append(w_greedy)
        correct.append(max(range(len(want)), key=lambda i: want[i][0]) == s["doc"]["answer"])
    assert out["results"]["hinfer_tiny"]["acc,none"] == pytest.approx(sum(correct) / len(correct))
    assert True in greedy_flags and False in greedy_flags
    for s in out["samples"]["hinfer_rolling"]:
        (text,) = s["arguments"][0]
        n = len(demo_llm.tokenizer.encode(text)) + 1
        assert s["resps"][0][0] == pytest.approx(rolling_score(demo_llm, text), abs=ATOL_PER_TOKEN * n), text


@pytest.fixture
def offline(monkeypatch):
    # Everything is local: the task's data is a JSON file, the tokenizer the packaged one or the server's.
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_local_completions_loglikelihood(demo_url, demo_llm, tmp_path, offline):
    from hinfer.fixtures import tokenizer_dir

    docs = [*DOCS, greedy_doc(demo_llm)]
    model_args = {"model": "demo", "base_url": demo_url + "/v1/completions", "tokenizer_backend": "huggingface",
                  "tokenizer": str(tokenizer_dir()), "batch_size": 4, "max_retries": 1}
    out = lm_eval.simple_evaluate(model="local-completions", model_args=model_args, tasks=tasks(tmp_path, docs),
                                  log_samples=True, bootstrap_iters=0)
    check_scores(out, docs, demo_llm)


def test_local_completions_with_the_server_as_tokenizer(demo_url, demo_llm, tmp_path, offline):
    """No tokenizer arguments: lm-eval finds /tokenizer_info and /tokenize and tokenizes through the server."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    docs = [*DOCS, greedy_doc(demo_llm)]
    lm = LocalCompletionsAPI(model="demo", base_url=demo_url + "/v1/completions", batch_size=4, max_retries=1)
    assert lm.tokenizer_backend == "remote"
    assert lm.prefix_token_id == demo_llm.tokenizer.token_to_id("<|im_end|>")  # what rolling_score assumes
    out = lm_eval.simple_evaluate(model=lm, tasks=tasks(tmp_path, docs), log_samples=True, bootstrap_iters=0)
    check_scores(out, docs, demo_llm)


def test_remote_tokenizer_with_an_api_key(tokenizer):
    """With --api-key the key goes in `auth_token` (lm-eval's tokenizer requests send only that one)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from scripted_engine import ScriptedEngine
    from server_live import MODEL, live_server

    from hinfer.server import create_app

    engine = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    with live_server(create_app(engine, tokenizer, model_name=MODEL, api_key="s3cret")) as url:
        lm = LocalCompletionsAPI(model=MODEL, base_url=url + "/v1/completions", auth_token="s3cret")
        assert lm.tokenizer_backend == "remote"
        assert lm.tok_encode("Hello world") == tokenizer.encode("Hello world")
        assert lm.tokenizer.decode(tokenizer.encode("Hello world")) == "Hello world"
        assert lm.eot_token_id == tokenizer.token_to_id("<|im_end|>")
