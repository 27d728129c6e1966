"""Reasoning splitter and tool-call parser: exact outputs, and the same result however the text is chunked."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from server_scripts import (
    MALFORMED_CALL,
    PARALLEL_CALLS,
    UNKNOWN_TOOL,
    WEATHER_ARGS,
    WEATHER_CALL,
    WEATHER_TOOL,
)

from hinfer.server.output import OutputParser, ReasoningPiece
from hinfer.server.reasoning import ReasoningSplitter
from hinfer.server.tool_parser import (
    TextPiece,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallParser,
    ToolCallStart,
    convert_value,
    tool_schemas,
)

SCHEMAS = tool_schemas([WEATHER_TOOL, {"type": "function", "function": {"name": "get_time", "parameters": {}}}])


def chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


def run_output(text: str, cuts: list[int], reasoning: bool = True, tools=SCHEMAS):
    ids = itertools.count()
    p = OutputParser(reasoning=reasoning, tools=tools, new_id=lambda: f"id{next(ids)}")
    pieces = [x for c in chunks(text, cuts) for x in p.feed(c)] + p.flush()
    reasoning_text = "".join(x.text for x in pieces if isinstance(x, ReasoningPiece))
    content = "".join(x.text for x in pieces if isinstance(x, TextPiece))
    args: dict[int, str] = {}
    order = []
    for x in pieces:
        if isinstance(x, ToolCallStart):
            assert x.index not in args
            args[x.index] = ""
            order.append((x.index, x.name))
        elif isinstance(x, ToolCallArgs):
            assert x.index in args, "arguments before the start"
            args[x.index] += x.delta
    calls = [(name, json.loads(args[i])) for i, name in order]
    assert [(c.name, c.arguments) for c in p.calls] == calls
    return reasoning_text, content, calls


cut_lists = st.lists(st.integers(0, 10_000), max_size=40)


@settings(max_examples=150, deadline=None)
@given(cuts=cut_lists)
def test_weather_call_any_chunking(cuts):
    r, c, calls = run_output(WEATHER_CALL, cuts)
    assert r == "The user wants the weather, so I call the tool."
    assert c == "Let me check that."
    assert calls == [("get_weather", WEATHER_ARGS)]


@settings(max_examples=100, deadline=None)
@given(cuts=cut_lists)
def test_parallel_and_degraded_any_chunking(cuts):
    assert run_output(PARALLEL_CALLS, cuts)[1:] == ("", [("get_weather", {"city": "Paris", "days": "not a number"}),
                                                         ("get_time", {"zone": "Asia/Tokyo"})])
    r, c, calls = run_output(UNKNOWN_TOOL, cuts)
    assert calls == [] and c == UNKNOWN_TOOL.split("\n\n", 1)[1]
    r, c, calls = run_output(MALFORMED_CALL, cuts)
    assert calls == [] and c == "Sure: <tool_call>\nthis is not a call\n</tool_call> done"


@settings(max_examples=100, deadline=None)
@given(text=st.lists(st.sampled_from(["<tool_call>", "</tool_call>", "<function=get_time>", "</function>",
                                              "<parameter=x>", "</parameter>", "\n", "a", " ", "<", "</think>",
                                       "<think>", "{", "1"]), max_size=40).map("".join), cuts=cut_lists)
def test_random_tag_soup_never_crashes(text, cuts):
    a = run_output(text, cuts)
    b = run_output(text, [])
    assert a == b  # chunking never changes the result


def test_reasoning_splitter():
    s = ReasoningSplitter(start_in_reasoning=True)
    out = []
    for piece in ["<th", "ink>\nI think", " so.\n", "</th", "ink>", "\n\n", "Answer", " here.\n"]:
        out += s.feed(piece)
    out += s.flush()
    kinds = {}
    for k, t in out:
        kinds[k] = kinds.get(k, "") + t
    assert kinds == {"reasoning": "I think so.", "content": "Answer here.\n"}
    s = ReasoningSplitter(start_in_reasoning=False)
    assert s.feed("plain </think> text") + s.flush() == [("content", "plain </think> text")]
    s = ReasoningSplitter(start_in_reasoning=True)
    assert s.feed("cut off mid-thought\n") + s.flush() == [("reasoning", "cut off mid-thought")]


def test_truncated_call_closes_with_what_was_parsed():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n4"
    r, c, calls = run_output(text, [], reasoning=False)
    assert calls == [("get_weather", {"city": "Paris"})] and c == ""


def test_forgiving_shapes():
    # Missing </parameter> before </function>, missing </tool_call>, no newlines at all.
    text = "<tool_call><function=get_weather><parameter=days>7</function>"
    assert run_output(text, [], reasoning=False)[2] == [("get_weather", {"days": 7})]
    text = "x <tool_call>\n<function=get_time>\n</function>\n</tool_call>\ntrailing words"
    assert run_output(text, [], reasoning=False)[1:] == ("x\ntrailing words", [("get_time", {})])


def test_no_tools_means_plain_text():
    r, c, calls = run_output(WEATHER_CALL, [5, 50], tools=None)
    assert calls == [] and "<tool_call>" in c


def test_convert_value():
    assert convert_value("42", {"type": "integer"}) == 42
    assert convert_value("42.0", {"type": "integer"}) == 42
    assert convert_value("4.5", {"type": "integer"}) == "4.5"
    assert convert_value("1e3", {"type": "number"}) == 1000.0
    assert convert_value("nan", {"type": "number"}) == "nan"
    assert convert_value("True", {"type": "boolean"}) is True
    assert convert_value("yes", {"type": "boolean"}) == "yes"
    assert convert_value('{"a": 1}', {"type": "object"}) == {"a": 1}
    assert convert_value("[1, 2]", {"type": "object"}) == "[1, 2]"
    assert convert_value("[1, 2]", {"type": "array"}) == [1, 2]
    assert convert_value("null", {"type": ["integer", "null"]}) is None
    assert convert_value("5", {"type": ["string", "integer"]}) == 5
    assert convert_value("5", {"anyOf": [{"type": "integer"}, {"type": "string"}]}) == 5
    assert convert_value("b", {"enum": ["a", "b"]}) == "b"
    assert convert_value(" spaced ", {"type": "string"}) == " spaced "
    assert convert_value("x", {}) == "x"
    assert convert_value("[" * 5000, {"type": "array"}) == "[" * 5000


def test_parser_events_shape():
    p = ToolCallParser(SCHEMAS, new_id=lambda: "id")
    ev = p.feed("<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>")
    ev += p.flush()
    assert [type(e) for e in ev] == [ToolCallStart, ToolCallArgs, ToolCallArgs, ToolCallEnd]
    assert "".join(e.delta for e in ev if isinstance(e, ToolCallArgs)) == '{"zone": "UTC"}'
