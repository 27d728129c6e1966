"""LangChain's ChatAnthropic against a live server (the Anthropic Messages API). Scripted engine for exact
answers; the demo model for `with_structured_output` (only the grammar makes its random words valid)."""

from __future__ import annotations

import json

import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, WEATHER_ARGS, WEATHER_TOOL

langchain_anthropic = pytest.importorskip("langchain_anthropic", reason="langchain-anthropic is not installed")
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from structured_models import ChoiceWeather  # noqa: E402

ANSWER = "Hello! How can I help you today?"
THINK = {"type": "enabled", "budget_tokens": 2048}


def chat(url: str, **kw) -> langchain_anthropic.ChatAnthropic:
    return langchain_anthropic.ChatAnthropic(model=kw.pop("model", MODEL), base_url=url, api_key="dummy",
                                             max_retries=0, timeout=60, max_tokens=kw.pop("max_tokens", 300), **kw)


def fold(chunks):
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return full


def blocks(msg, kind: str) -> list[dict]:
    return [b for b in msg.content if isinstance(b, dict) and b.get("type") == kind]


def test_invoke_and_stream_without_thinking(base_url, engine):
    llm = chat(base_url)
    r = llm.invoke("hi [[nothink]]")
    assert r.content == ANSWER and r.response_metadata["stop_reason"] == "end_turn"
    assert r.usage_metadata["input_tokens"] > 0 and r.usage_metadata["output_tokens"] > 0
    assert prompt_of(engine).endswith("<think>\n\n</think>\n\n")
    assert fold(list(llm.stream("hi [[nothink]]"))).content == ANSWER


def test_thinking_blocks_invoke_and_stream(base_url):
    llm = chat(base_url, thinking=THINK)
    for r in (llm.invoke("[[greet]]"), fold(list(llm.stream("[[greet]]")))):
        (thinking,) = blocks(r, "thinking")
        assert thinking["thinking"] == "The user greets me. I should greet them back." and thinking["signature"]
        assert [b["text"] for b in blocks(r, "text")] == [ANSWER]


def test_tool_round_trip_with_thinking(base_url, engine):
    llm = chat(base_url, thinking=THINK).bind_tools([WEATHER_TOOL])
    question = HumanMessage("weather? [[weather]]")
    for r in (llm.invoke([question]), fold(list(llm.stream([question])))):
        (call,) = r.tool_calls
        assert call["name"] == "get_weather" and call["args"] == WEATHER_ARGS and call["id"].startswith("toolu_")
        assert r.response_metadata["stop_reason"] == "tool_use"
    r2 = llm.invoke([question, r, ToolMessage("18C [[after_tool]]", tool_call_id=call["id"])])
    assert [b["text"] for b in blocks(r2, "text")] == [AFTER_TOOL.split("\n\n", 1)[1]]
    p = prompt_of(engine)
    # The thinking block LangChain sent back is the earlier turn's reasoning; the tool result follows the call.
    assert ("<think>\nThe user wants the weather, so I call the tool.\n</think>\n\nLet me check that.\n\n"
            "<tool_call>\n<function=get_weather>") in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p


def test_system_message_and_stop_sequences(base_url, engine):
    r = chat(base_url, thinking=THINK, stop_sequences=["STOP"]).invoke(
        [SystemMessage("Be terse."), HumanMessage("[[stop]]")])
    assert r.response_metadata["stop_reason"] == "stop_sequence"
    assert [b["text"] for b in blocks(r, "text")] == ["one two three "]
    assert prompt_of(engine).startswith("<|im_start|>system\nBe terse.<|im_end|>")


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_with_structured_output(demo_url, method):
    """function_calling forces a tool (`tool_choice` tool); json_schema sends `output_config.format`."""
    llm = chat(demo_url, model="demo", temperature=0, max_tokens=128)
    out = llm.with_structured_output(ChoiceWeather, method=method, include_raw=True).invoke("Weather in Paris?")
    assert out["parsing_error"] is None and isinstance(out["parsed"], ChoiceWeather), out["raw"]
    if method == "function_calling":
        (call,) = out["raw"].tool_calls
        assert call["name"] == "ChoiceWeather" and ChoiceWeather.model_validate(call["args"]) == out["parsed"]
    else:
        text = out["raw"].content if isinstance(out["raw"].content, str) else blocks(out["raw"], "text")[0]["text"]
        assert ChoiceWeather.model_validate(json.loads(text)) == out["parsed"]
