"""Structured output through every dialect, on the demo model (random weights: only the grammar makes its
answers valid, so a valid answer shows the constraint at work). Strings are length-bounded in the schemas, so
the grammar ends every answer well within max_tokens."""

from __future__ import annotations

import json
import re

import anthropic
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from structured_models import ChoiceWeather

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days", "sunny"],
           "properties": {"city": {"type": "string", "maxLength": 6},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7},
                          "sunny": {"type": "boolean"}}}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


class Weather(BaseModel):
    city: str = Field(max_length=6)
    days: int = Field(ge=1, le=7)
    sunny: bool


@pytest.fixture(scope="module")
def oai(demo_url):
    return openai.OpenAI(base_url=demo_url + "/v1", api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def ant(demo_url):
    return anthropic.Anthropic(base_url=demo_url, api_key="x", max_retries=0)


def test_openai_sdk_parse_pydantic(oai):
    for seed in (1, 2):
        r = oai.chat.completions.parse(model="demo", messages=MSGS, response_format=Weather, max_tokens=256,
                                       seed=seed, reasoning_effort="none")
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop"
        assert isinstance(msg.parsed, Weather), msg.content


def test_openai_json_object_and_schema_stream(oai):
    stream = oai.chat.completions.create(
        model="demo", messages=MSGS, max_tokens=256, seed=5, stream=True, reasoning_effort="none",
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), WEATHER)


def test_vllm_regex_and_choice(oai):
    r = oai.chat.completions.create(model="demo", messages=MSGS, max_tokens=30, reasoning_effort="none",
                                    extra_body={"structured_outputs": {"regex": "[A-C]{3}-[0-9]"}})
    assert len(r.choices[0].message.content) == 5
    r = oai.chat.completions.create(model="demo", messages=MSGS, max_tokens=30, reasoning_effort="none",
                                    extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].message.content in ("yes", "no")


def test_openai_forced_tool_calls(oai):
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = oai.chat.completions.create(model="demo", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                        max_tokens=256, seed=3, reasoning_effort="none",
                                        parallel_tool_calls=False)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c.message
        call = c.message.tool_calls[0]
        args = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            jsonschema.validate(args, WEATHER)
        else:
            assert choice == "required" and args == {}


def test_responses_text_format(oai):
    r = oai.responses.create(model="demo", input="Weather?", max_output_tokens=256, reasoning={"effort": "none"},
                             text={"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), WEATHER)


def test_openai_sdk_responses_parse_pydantic(oai):
    kw = dict(model="demo", input="Weather?", text_format=ChoiceWeather, reasoning={"effort": "none"},
              max_output_tokens=128, temperature=0)
    r = oai.responses.parse(**kw)
    assert r.status == "completed" and isinstance(r.output_parsed, ChoiceWeather), r.output_text
    with oai.responses.stream(**kw) as s:
        assert isinstance(s.get_final_response().output_parsed, ChoiceWeather)


def test_anthropic_sdk_messages_parse_pydantic(ant):
    m = ant.messages.parse(model="demo", max_tokens=128, messages=MSGS, output_format=ChoiceWeather,
                           extra_body={"temperature": 0})
    assert m.stop_reason == "end_turn" and isinstance(m.parsed_output, ChoiceWeather), m.content


def test_responses_forced_tool(oai):
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    r = oai.responses.create(model="demo", input="Weather?", max_output_tokens=256, reasoning={"effort": "none"},
                             tools=tools, tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)


def test_responses_forced_custom_tool_in_its_grammar(oai):
    """A custom tool with a lark grammar (Codex CLI's apply_patch form), named in tool_choice: the call's input is
    raw text in that grammar (bounded, so that random weights reach its end)."""
    lark = ('start: "*** Begin Patch" LF hunk "*** End Patch"\n'
            'hunk: "*** Update File: " /[a-z]{1,6}/ ".py" LF ("+" | "-") /[a-z ]{1,10}/ LF\n'
            "%import common.LF\n")
    tool = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": lark}}
    r = oai.responses.create(model="demo", input="Patch it", max_output_tokens=256, reasoning={"effort": "none"},
                             tools=[tool], tool_choice={"type": "custom", "name": "apply_patch"})
    calls = [o for o in r.output if o.type == "custom_tool_call"]
    assert len(calls) == 1 and calls[0].name == "apply_patch", r.output
    assert re.fullmatch(r"\*\*\* Begin Patch\n\*\*\* Update File: [a-z]{1,6}\.py\n[+-][a-z ]{1,10}\n\*\*\* End Patch",
                        calls[0].input), calls[0].input
    with pytest.raises(openai.BadRequestError):  # a grammar that does not parse
        oai.responses.create(model="demo", input="x", max_output_tokens=8, reasoning={"effort": "none"},
                             tools=[{**tool, "format": {**tool["format"], "definition": "start: (("}}],
                             tool_choice={"type": "custom", "name": "apply_patch"})


def test_anthropic_output_config_after_thinking(ant):
    """Thinking on (budget 8): the reasoning is free, then the JSON answer."""
    m = ant.messages.create(model="demo", max_tokens=256, messages=MSGS,
                            thinking={"type": "enabled", "budget_tokens": 8},
                            extra_body={"output_config": {"format": {"type": "json_schema", "schema": WEATHER}}})
    kinds = [b.type for b in m.content]
    assert kinds == ["thinking", "text"], m.content
    jsonschema.validate(json.loads(m.content[1].text), WEATHER)
    assert m.stop_reason == "end_turn"


def test_anthropic_forced_tool(ant):
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        m = ant.messages.create(model="demo", max_tokens=256, messages=MSGS, tools=tools, tool_choice=choice)
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and uses, m.content
        if uses[0].name == "get_weather":
            jsonschema.validate(uses[0].input, WEATHER)


def test_bad_schema_is_400(oai):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="demo", messages=MSGS, max_tokens=8,
                                    extra_body={"structured_outputs": {"regex": "(unclosed"}})


def test_schema_nested_too_deep_is_400(oai):
    """A schema whose grammar would take seconds to compile (nesting past MAX_SCHEMA_NESTING) is refused at once;
    one just inside the bound is taken."""
    from hinfer.sampling_params import MAX_SCHEMA_NESTING

    def chain(levels):  # each object level is two levels of the document: the schema and its properties
        s = {"type": "string"}
        for _ in range(levels):
            s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
        return s

    fmt = lambda s: {"type": "json_schema", "json_schema": {"name": "deep", "schema": s}}  # noqa: E731
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="demo", messages=MSGS, max_tokens=8,
                                    response_format=fmt(chain(MAX_SCHEMA_NESTING // 2 + 1)))
    assert "nests" in str(e.value)
    r = oai.chat.completions.create(model="demo", messages=MSGS, max_tokens=4,
                                    response_format=fmt(chain(MAX_SCHEMA_NESTING // 2 - 1)))
    assert r.choices[0].finish_reason in ("length", "stop")
