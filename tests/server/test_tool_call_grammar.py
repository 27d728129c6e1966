"""`hinfer serve --tool-call-grammar`: tool_choice auto requests with tools carry a checked-calls constraint (free
text, each started call held to a valid one) in every dialect; other constraints, tool_choice none and servers
without the flag are left as they were. (The grammar itself: tests/engine/test_structured.py.)"""

from __future__ import annotations

import httpx
import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server

from hinfer.server import create_app

TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}  # fmt: skip
MSGS = [{"role": "user", "content": "[[nothink]] time?"}]
PADDED = "<tool_call>\n<function=get_time>\n<parameter=zone>\n  UTC \n</parameter>\n</function>\n</tool_call>"


@pytest.fixture(scope="module")
def checked(tokenizer):
    eng = ScriptedEngine(tokenizer, {"[[padded]]": PADDED}, default="Ok.", model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL, tool_call_grammar=True)) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            yield c, eng


def _so(eng):
    return eng.requests[-1].sampling.structured


def test_auto_tool_calls_are_checked_in_every_dialect(checked):
    c, eng = checked
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": MSGS, "tools": [TOOL]})
    assert r.status_code == 200, r.text
    so = _so(eng)
    assert so.tools_optional and [t["function"]["name"] for t in so.tools] == ["get_time"] and so.after_reasoning
    r = c.post("/v1/responses", json={"model": MODEL, "input": "time?", "tools": [{"type": "function", "name": "get_time",
                                                                                   "parameters": {"type": "object"}}]})
    assert r.status_code == 200, r.text
    assert _so(eng).tools_optional
    r = c.post("/v1/messages", json={"model": MODEL, "max_tokens": 20, "messages": MSGS, "tools": [
        {"name": "get_time", "input_schema": {"type": "object"}}]})
    assert r.status_code == 200, r.text
    assert _so(eng).tools_optional and not _so(eng).after_reasoning  # no `thinking`: the template's is off


def test_other_constraints_and_no_tools_are_left_alone(checked):
    c, eng = checked
    body = {"model": MODEL, "messages": MSGS, "tools": [TOOL]}
    assert c.post("/v1/chat/completions", json={**body, "tool_choice": "none"}).status_code == 200
    assert _so(eng) is None
    assert c.post("/v1/chat/completions", json={**body, "tool_choice": "required"}).status_code == 200
    assert not _so(eng).tools_optional  # forced: an answer of calls only
    assert c.post("/v1/chat/completions", json={**body, "response_format": {"type": "json_object"}}).status_code == 200
    assert _so(eng).json_schema is not None and _so(eng).tools is None
    assert c.post("/v1/chat/completions", json={"model": MODEL, "messages": MSGS}).status_code == 200
    assert _so(eng) is None


def test_off_by_default(base_url, engine):
    r = httpx.post(base_url + "/v1/chat/completions", json={"model": MODEL, "messages": MSGS, "tools": [TOOL]})
    assert r.status_code == 200 and engine.requests[-1].sampling.structured is None


def test_checked_calls_trim_string_padding(checked):
    # the grammar treats the whitespace around a value as padding, as for forced calls: the parser trims it
    c, _ = checked
    r = c.post("/v1/chat/completions", json={"model": MODEL, "tools": [TOOL], "messages": [
        {"role": "user", "content": "[[padded]]"}], "chat_template_kwargs": {"enable_thinking": False}})
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_time" and call["arguments"] == '{"zone": "UTC"}'
