"""The served model's sampling defaults (its generation_config.json, engine.sampling_defaults) fill the sampling
fields a request leaves out, in every dialect; the fields it sends win."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from server_live import MODEL

from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults

DEFAULTS = SamplingDefaults(temperature=0.6, top_p=0.95, top_k=20, min_p=0.01, repetition_penalty=1.05)
MSG = [{"role": "user", "content": "[[greet]]"}]
BODIES = {  # route -> a body without sampling fields
    "/v1/chat/completions": {"model": MODEL, "messages": MSG, "max_tokens": 5},
    "/v1/completions": {"model": MODEL, "prompt": "Hello", "max_tokens": 5},
    "/v1/responses": {"model": MODEL, "input": "[[greet]]", "max_output_tokens": 16},
    "/v1/messages": {"model": MODEL, "messages": MSG, "max_tokens": 5},
}


@pytest.fixture
def defaults(engine) -> Iterator[SamplingDefaults]:
    engine.sampling_defaults = DEFAULTS
    yield DEFAULTS
    engine.sampling_defaults = NEUTRAL


def _sent(base_url: str, engine, route: str, **fields):
    r = httpx.post(base_url + route, json=BODIES[route] | fields, timeout=30)
    assert r.status_code == 200, r.text
    return engine.requests[-1].sampling


@pytest.mark.parametrize("route", list(BODIES))
def test_omitted_fields_take_the_models_defaults(base_url: str, engine, defaults, route: str) -> None:
    sp = _sent(base_url, engine, route)
    assert (sp.temperature, sp.top_p) == (0.6, 0.95)
    if route != "/v1/responses":  # the Responses API has no top_k / min_p / penalty fields: the defaults stand
        assert sp.top_k == 20
    assert (sp.min_p, sp.repetition_penalty) == (0.01, 1.05)
    own = _sent(base_url, engine, route, temperature=0.0, top_p=0.5)
    assert (own.temperature, own.top_p) == (0.0, 0.5) and own.greedy


def test_neutral_defaults_without_a_generation_config(base_url: str, engine) -> None:
    sp = _sent(base_url, engine, "/v1/chat/completions")
    assert (sp.temperature, sp.top_p, sp.top_k, sp.min_p) == (1.0, 1.0, 0, 0.0)
