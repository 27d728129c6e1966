"""LangChain's ChatOpenAI against a live server: Chat Completions and, with `use_responses_api=True`, the
Responses API. Scripted engine for exact answers; the demo model for `with_structured_output` (only the grammar
makes its random words valid)."""

from __future__ import annotations

import json

import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, WEATHER_ARGS, WEATHER_TOOL

langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from structured_models import ChoiceWeather  # noqa: E402

ANSWER = "Hello! How can I help you today?"
THOUGHT = "The user greets me. I should greet them back."
AFTER = AFTER_TOOL.split("\n\n", 1)[1]


def chat(url: str, **kw) -> langchain_openai.ChatOpenAI:
    return langchain_openai.ChatOpenAI(model=kw.pop("model", MODEL), base_url=url + "/v1", api_key="dummy",
                                       max_retries=0, timeout=60, **kw)


def fold(chunks):
    """Aggregate a LangChain stream the way its callers do (chunk + chunk)."""
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return full


def texts(msg: AIMessage) -> str:
    """The answer text of a message whose content is a string or Responses-style blocks."""
    if isinstance(msg.content, str):
        return msg.content
    return "".join(b.get("text", "") for b in msg.content if b.get("type") == "text")


def test_chat_invoke_stream_and_usage(base_url):
    llm = chat(base_url)
    r = llm.invoke("hi [[greet]]")
    assert r.content == ANSWER and r.response_metadata["finish_reason"] == "stop"
    u = r.usage_metadata
    assert u["input_tokens"] > 0 and u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    assert 0 < u["output_token_details"]["reasoning"] < u["output_tokens"]
    assert fold(list(llm.stream("hi [[greet]]"))).content == ANSWER


def test_chat_tool_round_trip(base_url, engine):
    llm = chat(base_url).bind_tools([WEATHER_TOOL])
    question = HumanMessage("weather? [[weather]]")
    r = llm.invoke([question])
    assert r.content == "Let me check that." and r.response_metadata["finish_reason"] == "tool_calls"
    (call,) = r.tool_calls
    assert call["name"] == "get_weather" and call["args"] == WEATHER_ARGS and call["id"].startswith("call_")
    streamed = fold(list(llm.stream([question])))
    assert [c["args"] for c in streamed.tool_calls] == [WEATHER_ARGS]
    r2 = llm.invoke([question, r, ToolMessage("18C [[after_tool]]", tool_call_id=call["id"])])
    assert r2.content == AFTER
    p = prompt_of(engine)
    assert "Let me check that.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis" in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p


def test_responses_invoke_and_stream(base_url):
    llm = chat(base_url, use_responses_api=True)
    r = llm.invoke("hi [[greet]]")
    assert [b["type"] for b in r.content] == ["reasoning", "text"]
    assert r.content[0]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert texts(r) == ANSWER and r.usage_metadata["output_token_details"]["reasoning"] > 0
    streamed = fold(list(llm.stream("hi [[greet]]")))
    # LangChain streams reasoning summaries only, so the streamed reasoning block stays empty.
    assert [b["type"] for b in streamed.content] == ["reasoning", "text"] and texts(streamed) == ANSWER


def test_responses_tool_round_trip(base_url, engine):
    llm = chat(base_url, use_responses_api=True).bind_tools([WEATHER_TOOL])
    question = HumanMessage("weather? [[weather]]")
    r = llm.invoke([question])
    (call,) = r.tool_calls
    assert call["name"] == "get_weather" and call["args"] == WEATHER_ARGS and texts(r) == "Let me check that."
    r2 = llm.invoke([question, r, ToolMessage("18C [[after_tool]]", tool_call_id=call["id"])])
    assert texts(r2) == AFTER
    p = prompt_of(engine)
    # The reasoning item went back with the history and was rendered as the earlier turn's thinking.
    assert ("<think>\nThe user wants the weather, so I call the tool.\n</think>\n\nLet me check that.\n\n"
            "<tool_call>\n<function=get_weather>") in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p


def test_responses_stream_tool_call_and_encrypted_reasoning(base_url, engine):
    llm = chat(base_url, use_responses_api=True, include=["reasoning.encrypted_content"]).bind_tools([WEATHER_TOOL])
    question = HumanMessage("[[weather]]")
    r = fold(list(llm.stream([question])))
    (call,) = r.tool_calls
    assert call["args"] == WEATHER_ARGS
    # Streamed reasoning reaches LangChain only as the opaque blob; sent back, it restores the thinking.
    llm.invoke([question, r, ToolMessage("18C [[after_tool]]", tool_call_id=call["id"])])
    assert "<think>\nThe user wants the weather, so I call the tool.\n</think>" in prompt_of(engine)


def test_responses_previous_response_id(base_url, engine):
    llm = chat(base_url, use_responses_api=True, use_previous_response_id=True).bind_tools([WEATHER_TOOL])
    question = HumanMessage("[[weather]]")
    r = llm.invoke([question])
    call = r.tool_calls[0]
    r2 = llm.invoke([question, r, ToolMessage("18C [[after_tool]]", tool_call_id=call["id"])])
    assert texts(r2) == AFTER
    p = prompt_of(engine)
    # Only the tool output was sent; the server took the rest from the stored response.
    assert "<|im_start|>user\n[[weather]]<|im_end|>" in p and "<function=get_weather>" in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p


@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(demo_url, responses, method):
    # Greedy (temperature 0): the same answer every run. The Responses API takes no seed.
    llm = chat(demo_url, model="demo", use_responses_api=responses, temperature=0, max_tokens=128,
               reasoning_effort="none")
    out = llm.with_structured_output(ChoiceWeather, method=method, include_raw=True).invoke("Weather in Paris?")
    assert out["parsing_error"] is None and isinstance(out["parsed"], ChoiceWeather), out["raw"]
    if method == "function_calling":
        (call,) = out["raw"].tool_calls
        assert call["name"] == "ChoiceWeather" and ChoiceWeather.model_validate(call["args"]) == out["parsed"]
    else:
        assert ChoiceWeather.model_validate(json.loads(texts(out["raw"]))) == out["parsed"]
