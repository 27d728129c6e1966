"""Sampling parameters at the edges of their ranges against a real `hinfer serve` (demo model, real sampler):
out-of-range values are 400s naming the parameter; every other answer, streamed or not, is strict JSON (no
NaN/Infinity), with finite logprobs and only tokens of the tokenizer's vocabulary (the checkpoint's padding rows
beyond it decode to no bytes at all, so a token with empty `bytes` would be one)."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from server_proc import serve_process

# (value, valid?) per parameter: both ends, just past them, and values that overflow float32.
EDGES: dict[str, list[tuple[object, bool]]] = {
    "temperature": [(0, True), (1e-45, True), (1e-5, True), (2.0, True), (100.0, True), (100.001, False),
                    (3.5e38, False), (1.7e308, False), (-1e-45, False)],
    "top_p": [(1e-45, True), (1e-8, True), (0.5, True), (1.0, True), (0.0, False), (1.0000001, False)],
    "top_k": [(-1, True), (0, True), (1, True), (248076, True), (248320, True), (2**63 + 5, True), (-2, False)],
    "min_p": [(0.0, True), (5e-324, True), (1.0, True), (1.5, False)],
    "presence_penalty": [(-2.0, True), (2.0, True), (2.0000001, False)],
    "frequency_penalty": [(-2.0, True), (2.0, True), (-3.0, False)],
    "repetition_penalty": [(1e-45, False), (0.01, True), (1.0, True), (100.0, True), (3.5e38, False)],
    "logit_bias": [({"0": 100, "248076": -100}, True), ({"248076": 100}, True), ({"5": 100.5}, False)],
}
DIALECT_PARAMS = {
    "chat": list(EDGES),
    "completions": list(EDGES),
    "messages": ["temperature", "top_p", "top_k"],
    "responses": ["temperature", "top_p"],
}


def _strict(text: str):
    def no_constant(name: str):
        raise AssertionError(f"non-JSON number {name} in a response")
    return json.loads(text, parse_constant=no_constant)


def _request(dialect: str, params: dict, stream: bool) -> tuple[str, dict]:
    base = {"model": "demo", "stream": stream, **params}
    if dialect == "chat":
        return "/v1/chat/completions", {**base, "max_tokens": 4, "logprobs": True, "top_logprobs": 5,
                                        "messages": [{"role": "user", "content": "Hi"}]}
    if dialect == "completions":
        return "/v1/completions", {**base, "max_tokens": 4, "logprobs": 5, "prompt": "Hi"}
    if dialect == "messages":
        return "/v1/messages", {**base, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    return "/v1/responses", {**base, "max_output_tokens": 4, "input": "Hi"}


def _payloads(r: httpx.Response, stream: bool) -> list:
    if not stream:
        return [_strict(r.text)]
    out = []
    for line in r.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(_strict(line[6:]))
    return out


def _check_tokens(dialect: str, payloads: list) -> None:
    for p in payloads:
        assert p.get("error") is None and p.get("type") not in ("error", "response.failed"), p
        if dialect == "chat":
            for ch in p.get("choices", []):
                for tok in ((ch.get("logprobs") or {}).get("content") or []):
                    assert tok["bytes"] and tok["logprob"] is not None and tok["logprob"] <= 0, tok
                    assert all(t["bytes"] for t in tok["top_logprobs"]), tok
        if dialect == "completions":
            for ch in p.get("choices", []):
                lp = ch.get("logprobs")
                if lp:
                    assert all(v is not None and v <= 0 for v in lp["token_logprobs"]), lp


@pytest.fixture(scope="module")
def demo_url(demo_cache):
    with serve_process(["--max-context", "2048", "--max-concurrency", "4"], demo_cache) as sp:
        yield sp.url


@pytest.mark.parametrize("seed", range(4))
def test_edge_sampling_parameters_never_break_a_response(demo_url, seed):
    rng = random.Random(seed)
    print("seed", seed)
    with httpx.Client(base_url=demo_url, timeout=120) as c:
        for i in range(12):
            dialect = list(DIALECT_PARAMS)[i % 4]
            names = rng.sample(DIALECT_PARAMS[dialect], k=min(3, len(DIALECT_PARAMS[dialect])))
            picks = {n: rng.choice(EDGES[n]) for n in names}
            params = {n: v for n, (v, _) in picks.items()}
            invalid = {n for n, (_, ok) in picks.items() if not ok}
            stream = rng.random() < 0.5
            path, body = _request(dialect, params, stream)
            r = c.post(path, json=body)
            print(dialect, stream, params, r.status_code)
            if invalid:
                assert r.status_code == 400, (params, r.text)
                err = _strict(r.text)["error"]
                named = err.get("param") or err["message"]
                assert any(n in named for n in invalid), (invalid, err)
                continue
            assert r.status_code == 200, (params, r.text)
            _check_tokens(dialect, _payloads(r, stream))
