"""LiteLLM against a live server over a scripted engine: its OpenAI-compatible providers (`hosted_vllm/`,
`openai/`) and its Anthropic provider, chat with streaming and tool round trips, `responses`, `text_completion`,
and the mapping of our context-overflow errors onto its ContextWindowExceededError."""

from __future__ import annotations

import json
import os

import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, WEATHER_ARGS, WEATHER_TOOL
from structured_models import ChoiceWeather

# LiteLLM fetches its model price list from the network on import unless told to use the packaged copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm", reason="litellm is not installed")
# Its pydantic models warn about ReadOnly TypedDict items while they are first built: noise, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")

ANSWER = "Hello! How can I help you today?"
THOUGHT = "The user greets me. I should greet them back."
# LiteLLM does not know the served model, so it refuses `thinking` for the Anthropic provider unless allowed.
ANTHROPIC_THINK = {"thinking": {"type": "enabled", "budget_tokens": 1024}, "allowed_openai_params": ["thinking"]}


@pytest.fixture(params=["hosted_vllm", "openai", "anthropic"])
def route(request, base_url) -> dict:
    """The keyword arguments of one LiteLLM provider pointed at the server, thinking on."""
    if request.param == "anthropic":
        return {"model": f"anthropic/{MODEL}", "api_base": base_url, "api_key": "dummy", **ANTHROPIC_THINK}
    return {"model": f"{request.param}/{MODEL}", "api_base": base_url + "/v1", "api_key": "dummy"}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_completion_and_stream_keep_reasoning(route):
    r = litellm.completion(messages=user("[[greet]]"), max_tokens=200, **route)
    m = r.choices[0].message
    assert (m.content, m.reasoning_content, r.choices[0].finish_reason) == (ANSWER, THOUGHT, "stop")
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    text = thought = ""
    for chunk in litellm.completion(messages=user("[[greet]]"), max_tokens=200, stream=True, **route):
        delta = chunk.choices[0].delta
        text += delta.content or ""
        thought += getattr(delta, "reasoning_content", None) or ""
    assert (text, thought) == (ANSWER, THOUGHT)


def test_tool_round_trip(route, engine):
    question = user("[[weather]]")
    r = litellm.completion(messages=question, tools=[WEATHER_TOOL], max_tokens=300, **route)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content == "Let me check that."
    (call,) = m.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == WEATHER_ARGS
    history = [*question, m.model_dump(), {"role": "tool", "tool_call_id": call.id, "content": "18C [[after_tool]]"}]
    r2 = litellm.completion(messages=history, tools=[WEATHER_TOOL], max_tokens=300, **route)
    assert r2.choices[0].message.content == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis" in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p


def test_context_overflow_is_context_window_error(route):
    route = {k: v for k, v in route.items() if k not in ANTHROPIC_THINK}
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(messages=user("word " * 5000), max_tokens=10, **route)


def test_responses_and_text_completion(base_url, engine):
    kw = {"model": f"openai/{MODEL}", "api_base": base_url + "/v1", "api_key": "dummy"}
    r = litellm.responses(input="[[greet]]", **kw)
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert r.output[1].content[0].text == ANSWER
    r = litellm.text_completion(prompt="Once upon a time [[greet]]", max_tokens=5, **kw)
    assert r.choices[0].text == "The user greets me"  # raw: no template, no reasoning split
    assert engine.requests[-1].prompt_token_ids == engine.tokenizer.encode("Once upon a time [[greet]]")


@pytest.mark.parametrize("provider", ["hosted_vllm", "anthropic"])
def test_response_format_pydantic_on_the_demo_model(demo_url, provider):
    """`response_format=Model`: a JSON schema over Chat Completions, a forced tool over Anthropic (LiteLLM turns
    its input back into the message content). Greedy, so the same answer every run."""
    if provider == "anthropic":
        kw = {"model": "anthropic/demo", "api_base": demo_url}
    else:
        kw = {"model": "hosted_vllm/demo", "api_base": demo_url + "/v1", "reasoning_effort": "none"}
    r = litellm.completion(messages=user("Weather in Paris?"), response_format=ChoiceWeather, max_tokens=128,
                           temperature=0, api_key="dummy", **kw)
    ChoiceWeather.model_validate_json(r.choices[0].message.content)
