"""OpenAI Responses API end to end: the official `openai` SDK (`client.responses`) against a live server over a
scripted engine, shaped like Codex CLI's requests (full history with store false, or previous_response_id)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, GREETING, PATCH, TIME_TOOL, WEATHER_ARGS, WEATHER_TOOL

TOOLS = [{"type": "function", **t["function"]} for t in (WEATHER_TOOL, TIME_TOOL)]  # the flat Responses shape
ANSWER = GREETING.split("\n\n", 1)[1]
THOUGHT = GREETING.split("\n</think>", 1)[0]


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)


def squeeze(types):
    """Event types with repeats of the same delta collapsed."""
    out = []
    for t in types:
        if not out or out[-1] != t or not t.endswith(".delta"):
            out.append(t)
    return out


def test_create_non_streaming(client, engine):
    r = client.responses.create(model=MODEL, input="[[greet]]", instructions="Be kind.")
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed" and r.model == MODEL
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == THOUGHT and r.output[0].summary == []
    assert r.output[0].encrypted_content is None  # only with include=["reasoning.encrypted_content"]
    msg = r.output[1]
    assert msg.role == "assistant" and msg.status == "completed" and msg.content[0].type == "output_text"
    assert r.output_text == ANSWER
    u = r.usage
    assert u.input_tokens == len(engine.requests[-1].prompt_token_ids) and u.input_tokens_details.cached_tokens == 0
    assert 0 < u.output_tokens_details.reasoning_tokens < u.output_tokens
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert prompt_of(engine).startswith("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\n[[greet]]")
    assert prompt_of(engine).endswith("<|im_start|>assistant\n<think>\n")


def test_stream_event_sequence(client):
    events = list(client.responses.create(model=MODEL, input="[[greet]]", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert squeeze([e.type for e in events]) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == ANSWER == next(e.text for e in events if e.type == "response.output_text.done")
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thought == THOUGHT
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "reasoning"), (1, "message")]
    final = events[-1].response
    assert final.status == "completed" and final.output_text == ANSWER and final.usage.output_tokens > 0
    assert {e.item_id for e in events if e.type == "response.output_text.delta"} == {final.output[1].id}


def test_stream_helper(client):
    with client.responses.stream(model=MODEL, input="[[greet]]") as s:
        final = s.get_final_response()
    assert final.output_text == ANSWER


def test_function_call_round_trip(client, engine):
    r = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, store=False)
    assert [i.type for i in r.output] == ["reasoning", "message", "function_call"]
    call = r.output[2]
    assert call.name == "get_weather" and json.loads(call.arguments) == WEATHER_ARGS
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.status == "completed"
    assert "<tools>" in prompt_of(engine) and '"name": "get_weather"' in prompt_of(engine)
    # Codex-style follow-up: the whole history, then the tool's output.
    history = [{"role": "user", "content": [{"type": "input_text", "text": "[[weather]]"}]},
               *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "18C [[after_tool]]"}]
    r2 = client.responses.create(model=MODEL, input=history, tools=TOOLS, store=False)
    assert r2.output_text == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p
    assert ("<think>\nThe user wants the weather, so I call the tool.\n</think>\n\nLet me check that.\n\n"
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>") in p


def call_stream(events, item_type: str, stem: str):
    """The one tool-call item of a stream: output_item.added, its `stem` deltas, .done, output_item.done, then
    response.completed; -> (the added event, the deltas joined, the .done event)."""
    types = squeeze([e.type for e in events])
    i = types.index(f"response.{stem}.delta")
    assert types[i - 1] == "response.output_item.added" and types[i + 1:] == [
        f"response.{stem}.done", "response.output_item.done", "response.completed"]
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == item_type)
    done = next(e for e in events if e.type == f"response.{stem}.done")
    assert done.item_id == added.item.id
    return added, "".join(e.delta for e in events if e.type == f"response.{stem}.delta"), done


def test_function_call_stream_events(client):
    events = list(client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, stream=True))
    added, args, done = call_stream(events, "function_call", "function_call_arguments")
    assert added.item.arguments == "" and added.item.name == "get_weather"
    assert json.loads(args) == json.loads(done.arguments) == WEATHER_ARGS
    assert json.loads(events[-1].response.output[-1].arguments) == WEATHER_ARGS


# Codex CLI's apply_patch in its freeform form: a custom tool with a lark grammar
PATCH_TOOL = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
              "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" LF hunk+'}}


def test_custom_tool_call_round_trip(client, engine):
    """A custom tool is shown as a function of one string parameter carrying its grammar; its call comes back as a
    custom_tool_call item whose input is the raw text; the history with the call and its output renders the call
    as the model wrote it."""
    r = client.responses.create(model=MODEL, input="[[patch]]", tools=[*TOOLS, PATCH_TOOL], store=False)
    assert [i.type for i in r.output] == ["reasoning", "custom_tool_call"]
    call = r.output[1]
    assert call.name == "apply_patch" and call.input == PATCH and call.call_id.startswith("call_")
    assert call.id.startswith("ctc_")
    p = prompt_of(engine)
    assert '"name": "apply_patch"' in p and "must follow this lark grammar" in p and "hunk+" in p
    history = [{"role": "user", "content": "[[patch]]"}, *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done [[after_tool]]"}]
    r2 = client.responses.create(model=MODEL, input=history, tools=[PATCH_TOOL], store=False)
    assert r2.output_text == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert f"<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>" in p
    assert "<tool_response>\nDone [[after_tool]]\n</tool_response>" in p


def test_custom_tool_call_stream_events(client):
    events = list(client.responses.create(model=MODEL, input="[[patch]]", tools=[PATCH_TOOL], stream=True))
    added, text, done = call_stream(events, "custom_tool_call", "custom_tool_call_input")
    assert added.item.input == "" and added.item.name == "apply_patch"
    assert text == done.input == PATCH
    assert events[-1].response.output[-1].input == PATCH
    assert not any(e.type.startswith("response.function_call") for e in events)


def test_custom_tool_choice_names_it(client, engine):
    r = client.responses.create(model=MODEL, input="[[patch]]", tools=[*TOOLS, PATCH_TOOL],
                                tool_choice={"type": "custom", "name": "apply_patch"}, store=False)
    assert r.output[-1].type == "custom_tool_call" and r.output[-1].input == PATCH
    so = engine.requests[-1].sampling.structured  # the named choice is grammar-enforced, in the tool's grammar
    assert so is not None and so.tool_name == "apply_patch"
    assert so.tool_grammars == {"apply_patch": {"parameter": "input", "syntax": "lark",
                                                "definition": PATCH_TOOL["format"]["definition"]}}


# Codex CLI's MCP tools: one namespace per server
MCP_TOOLS = [{"type": "namespace", "name": "mcp__files", "description": "Files on disk.", "tools": [
    {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]}]


def test_namespace_tool_calls_name_both(client, engine):
    """A namespace member is shown as namespace__name; its call comes back with name and namespace apart (as Codex
    CLI routes it), streamed alike, and a history carrying them renders the name the model called."""
    r = client.responses.create(model=MODEL, input="[[mcp]]", tools=MCP_TOOLS, store=False)
    call = r.output[-1]
    assert call.type == "function_call" and (call.name, call.namespace) == ("read", "mcp__files")
    assert json.loads(call.arguments) == {"path": "README.md"}
    assert '"name": "mcp__files__read"' in prompt_of(engine) and "(mcp__files) Files on disk." in prompt_of(engine)
    events = list(client.responses.create(model=MODEL, input="[[mcp]]", tools=MCP_TOOLS, stream=True))
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call")
    assert (added.item.name, added.item.namespace) == ("read", "mcp__files")
    assert events[-1].response.output[-1].namespace == "mcp__files"
    history = [{"role": "user", "content": "[[mcp]]"}, *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "# Title [[after_tool]]"}]
    r2 = client.responses.create(model=MODEL, input=history, tools=MCP_TOOLS, store=False)
    assert r2.output_text == AFTER_TOOL.split("\n\n", 1)[1]
    assert "<function=mcp__files__read>\n<parameter=path>\nREADME.md\n</parameter>" in prompt_of(engine)


# Codex CLI's client-executed tool search, and what it finds: one namespace of deferred tools
SEARCH_TOOL = {"type": "tool_search", "execution": "client", "description": "Find the apps' tools.",
               "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                               "limit": {"type": "integer"}}, "required": ["query"]}}
FOUND = [{"type": "namespace", "name": "mcp__calendar", "description": "Plan events.", "tools": [
    {"type": "function", "name": "create_event", "description": "Create an event. [[calendar]]", "defer_loading": True,
     "parameters": {"type": "object", "properties": {"title": {"type": "string"}, "minutes": {"type": "integer"}}}}]}]


def test_client_tool_search_round_trip(client, engine):
    """The search is shown as a function with the client's parameters; its call comes back as a tool_search_call
    item (execution client, arguments as an object typed by them); the client's tool_search_output lists the tools
    found in a tool response, and a call of one comes back with its namespace, as Codex CLI routes it."""
    tools = [TOOLS[0], SEARCH_TOOL]
    r = client.responses.create(model=MODEL, input="[[search]]", tools=tools, store=False)
    call = r.output[-1]
    assert call.type == "tool_search_call" and call.execution == "client" and call.status == "completed"
    assert call.arguments == {"query": "calendar events", "limit": 5} and call.call_id.startswith("call_")
    assert call.id.startswith("tsc_")
    p = prompt_of(engine)
    assert '"name": "tool_search"' in p and "Find the apps' tools." in p and "create_event" not in p
    history = [{"role": "user", "content": "[[search]]"}, *[i.model_dump(exclude_none=True) for i in r.output],
               {"type": "tool_search_output", "call_id": call.call_id, "execution": "client", "status": "completed",
                "tools": FOUND}]
    r2 = client.responses.create(model=MODEL, input=history, tools=tools, store=False)
    found = r2.output[-1]
    assert found.type == "function_call" and (found.name, found.namespace) == ("create_event", "mcp__calendar")
    assert json.loads(found.arguments) == {"title": "Stand-up", "minutes": 15}  # typed by the loaded schema
    p = prompt_of(engine)
    assert ("<function=tool_search>\n<parameter=query>\ncalendar events\n</parameter>\n<parameter=limit>\n5\n"
            "</parameter>") in p
    head, tail = p.split("<tool_response>\nThese functions can be called from now on:\n<tools>\n", 1)
    assert "mcp__calendar__create_event" not in head  # listed where it was found, not in the system prompt
    assert tail.startswith('{"type": "function", "function": {"name": "mcp__calendar__create_event"')
    # and named by a forced choice, grammar-enforced like any tool given
    r3 = client.responses.create(model=MODEL, input=history, tools=tools, store=False,
                                 tool_choice={"type": "function", "name": "create_event", "namespace": "mcp__calendar"})
    so = engine.requests[-1].sampling.structured
    assert so.tool_name == "mcp__calendar__create_event" and [t["function"]["name"] for t in so.tools] == [
        "mcp__calendar__create_event"]
    assert r3.output[-1].namespace == "mcp__calendar"


def test_client_tool_search_stream_events(client):
    """A tool_search_call streams as its item only (added with empty arguments, done with them): no argument
    deltas, as OpenAI streams it."""
    events = list(client.responses.create(model=MODEL, input="[[search]]", tools=[SEARCH_TOOL], stream=True))
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "tool_search_call")
    done = next(e for e in events if e.type == "response.output_item.done" and e.item.type == "tool_search_call")
    assert added.item.arguments == {} and added.item.status == "in_progress"
    assert done.item.arguments == {"query": "calendar events", "limit": 5} and done.item.status == "completed"
    assert added.output_index == done.output_index and added.item.id == done.item.id
    assert not any(e.type.startswith("response.function_call") for e in events)


def test_server_tool_search_and_additional_tools(client, engine):
    """A server-executed tool search is left out (every tool given is shown: nothing to search for), and its call
    is text like any call of a tool not given; an additional_tools item lists its tools where it stands and makes them
    callable."""
    r = client.responses.create(model=MODEL, input="[[search]]", store=False,
                                tools=[TOOLS[0], {"type": "tool_search"}])
    assert '"name": "tool_search"' not in prompt_of(engine).split("</tools>", 1)[0]
    assert r.output[-1].type == "message" and "<function=tool_search>" in r.output[-1].content[0].text
    items = [{"type": "additional_tools", "role": "developer", "tools": FOUND}, {"role": "user", "content": "go"}]
    r2 = client.responses.create(model=MODEL, input=items, store=False, tools=[TOOLS[0]])
    assert r2.output[-1].type == "function_call" and r2.output[-1].namespace == "mcp__calendar"
    assert "These functions can be called from now on:\n<tools>\n" in prompt_of(engine)


def test_allowed_tools_choice(client, engine):
    """allowed_tools in the Responses shape: a call of a tool not allowed stays text; required holds the grammar to
    the allowed ones."""
    r = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, store=False, tool_choice={
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]})
    assert r.output[-1].type == "message" and "<function=get_weather>" in r.output_text
    r = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, store=False, tool_choice={
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]})
    assert r.output[-1].type == "function_call" and r.output[-1].name == "get_weather"
    assert [t["function"]["name"] for t in engine.requests[-1].sampling.structured.tools] == ["get_weather"]


def test_previous_response_id_chaining(client, engine):
    r1 = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, instructions="Be terse.")
    call = r1.output[-1]
    r2 = client.responses.create(model=MODEL, previous_response_id=r1.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C [[after_tool]]"}])
    assert r2.previous_response_id == r1.id and r2.output_text == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert "<|im_start|>user\n[[weather]]<|im_end|>" in p and "<function=get_weather>" in p
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p
    assert "Be terse." not in p  # instructions do not carry over to the next response (OpenAI's rule)
    r3 = client.responses.create(model=MODEL, previous_response_id=r2.id, input="[[nothink]] thanks",
                                 reasoning={"effort": "none"})
    p = prompt_of(engine)
    assert "It is 18 °C in Paris right now.<|im_end|>\n<|im_start|>user\n[[nothink]] thanks" in p
    assert r3.output_text == "Hello! How can I help you today?"


def test_get_and_delete(client):
    r = client.responses.create(model=MODEL, input="[[greet]]")
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == ANSWER and got.status == "completed"
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", previous_response_id=r.id)
    assert e.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model=MODEL, input="[[greet]]", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    streamed = list(client.responses.create(model=MODEL, input="[[greet]]", stream=True))[-1].response
    assert client.responses.retrieve(streamed.id).output_text == ANSWER


def test_store_is_bounded(engine, tokenizer):
    from hinfer.server.responses_store import ResponseStore

    store = ResponseStore(max_entries=2)
    for i in range(3):
        store.put({"id": f"r{i}", "output": []}, [])
    assert store.get("r0") is None and store.get("r1") is not None and len(store) == 2
    store.put({"id": "r3", "output": []}, [])
    assert store.get("r2") is None and store.get("r1") is not None  # r1 was used last: r2 went
    small = ResponseStore(max_chars=100)
    small.put({"id": "big", "output": ["x" * 500]}, [])
    assert len(small) == 0


def test_encrypted_reasoning_round_trip(client, engine):
    r = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, store=False,
                                include=["reasoning.encrypted_content"])
    rs = r.output[0]
    assert rs.type == "reasoning" and rs.encrypted_content and "weather" not in rs.encrypted_content
    # Codex sends reasoning back without its text: only the opaque blob carries it.
    back = {"type": "reasoning", "id": rs.id, "summary": [], "encrypted_content": rs.encrypted_content}
    history = ["[[weather]]", back, r.output[2].model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": r.output[2].call_id, "output": "18C [[after_tool]]"}]
    history[0] = {"type": "message", "role": "user", "content": history[0]}
    client.responses.create(model=MODEL, input=history, tools=TOOLS, store=False)
    p = prompt_of(engine)
    assert "<think>\nThe user wants the weather, so I call the tool.\n</think>\n\n<tool_call>" in p


def test_developer_and_system_items(client, engine):
    client.responses.create(model=MODEL, instructions="Base.", input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Dev rules."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                         {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"role": "system", "content": "Mid rule."},
        {"role": "user", "content": "[[nothink]]"},
    ])
    p = prompt_of(engine)
    assert p.startswith("<|im_start|>system\nBase.\n\nDev rules.<|im_end|>\n<|im_start|>user\nab<|im_end|>\n")
    assert "ok<|im_end|>\n<|im_start|>system\nMid rule.<|im_end|>\n<|im_start|>user\n[[nothink]]" in p


def test_reasoning_effort_and_sampling(client, engine):
    client.responses.create(model=MODEL, input="[[nothink]]", reasoning={"effort": "none"}, temperature=0.3,
                            top_p=0.9, max_output_tokens=77)
    sp = engine.requests[-1].sampling
    assert (sp.temperature, sp.top_p, sp.max_tokens) == (0.3, 0.9, 77)
    assert prompt_of(engine).endswith("<think>\n\n</think>\n\n")
    client.responses.create(model=MODEL, input="[[greet]]", reasoning={"effort": "low", "summary": "auto"})
    assert engine.requests[-1].sampling.thinking_budget == 1024


def test_max_output_tokens_makes_it_incomplete(client):
    r = client.responses.create(model=MODEL, input="[[long]]", reasoning={"effort": "none"}, max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5 and r.output[-1].status == "incomplete"
    events = list(client.responses.create(model=MODEL, input="[[long]]", reasoning={"effort": "none"},
                                          max_output_tokens=5, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"


def test_tool_choice_parallel_and_ignored_tool_types(client, engine):
    tools = [{"type": "web_search"}, {"type": "local_shell"}, *TOOLS]
    r = client.responses.create(model=MODEL, input="[[parallel]]", tools=tools, parallel_tool_calls=False)
    assert [i.name for i in r.output if i.type == "function_call"] == ["get_weather"]
    assert r.parallel_tool_calls is False and "Call at most one function" in prompt_of(engine)
    assert "web_search" not in prompt_of(engine) and "local_shell" not in prompt_of(engine)
    r = client.responses.create(model=MODEL, input="[[parallel]]", tools=TOOLS)
    assert [i.name for i in r.output if i.type == "function_call"] == ["get_weather", "get_time"]
    client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS,
                            tool_choice={"type": "function", "name": "get_time"})
    assert '"get_weather"' in prompt_of(engine) and "calling the function get_time" in prompt_of(engine)
    r = client.responses.create(model=MODEL, input="[[weather_nothink]]", tools=TOOLS, tool_choice="none",
                                reasoning={"effort": "none"})
    assert all(i.type == "message" for i in r.output) and "<tools>" not in prompt_of(engine)
    client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, tool_choice="required")
    assert "You must answer by calling one or more" in prompt_of(engine)


BAD = [
    ({}, "model"),
    ({"input": ""}, "input"),
    ({"input": [{"type": "hologram"}]}, "input.0.type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input.0.role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/a.png"}]}]},
     "input.0.content.0.image_url"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0"),
    ({"input": [{"role": "user", "content": 5}]}, "input.0.content"),
    ({"input": ["just a string"]}, "input.0"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{nope"}]}, "input.0.arguments"),
    ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input.0.name"),
    ({"model": "gpt-17"}, "model"),
    ({"tools": [{"type": "function"}]}, "tools.0.name"),
    ({"tools": [{"type": "function", "name": "f", "parameters": "no"}]}, "tools.0.parameters"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}}, "text.format.schema"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"max_output_tokens": 10**9}, "max_output_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": -1}, None),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"background": True, "store": False}, "background"),
    ({"input": "word " * 5000}, "input"),
]


@pytest.mark.parametrize("patch,param", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_400_in_openai_shape(http, patch, param):
    body = {"model": MODEL, "input": "hi"}
    body.update(patch)
    body = {k: v for k, v in body.items() if k not in patch or patch[k] is not None}
    if patch == {}:
        body.pop("model")
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err


def test_context_errors_have_openai_code(http):
    r = http.post("/v1/responses", json={"model": MODEL, "input": "word " * 5000})
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and "maximum context length is 4096 tokens" in err["message"]


def test_unknown_response_id_is_404(http):
    r = http.get("/v1/responses/resp_nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert http.delete("/v1/responses/resp_nope").status_code == 404


def test_engine_failure_mid_stream_is_response_failed(base_url, engine):
    engine.fail_next = (3, RuntimeError("late kaboom"))
    with httpx.Client(base_url=base_url, timeout=30) as c:
        r = c.post("/v1/responses", json={"model": MODEL, "input": "[[greet]]", "stream": True})
    assert r.status_code == 200
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.failed" and "late kaboom" in events[-1]["response"]["error"]["message"]
    assert "event: response.failed" in r.text


def test_input_items_list_the_conversation(client, http):
    """GET /v1/responses/{id}/input_items: the conversation the stored response answered, newest first by
    default, each item with an id (made up, stable, where the client sent none) and its text as parts; pages by
    `limit` and `after`; 404 for an unknown response, 400 for an unknown `after`."""
    r1 = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS)
    call = r1.output[-1]
    r2 = client.responses.create(model=MODEL, previous_response_id=r1.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C [[after_tool]]"}])
    page = http.get(f"/v1/responses/{r2.id}/input_items", params={"order": "asc"}).json()
    assert page["object"] == "list" and page["has_more"] is False
    types = [it["type"] for it in page["data"]]
    assert types[0] == "message" and types[-1] == "function_call_output" and "function_call" in types
    first = page["data"][0]
    assert first["role"] == "user" and first["content"] == [{"type": "input_text", "text": "[[weather]]"}]
    assert page["first_id"] == first["id"] and page["last_id"] == page["data"][-1]["id"]
    again = http.get(f"/v1/responses/{r2.id}/input_items", params={"order": "asc"}).json()
    assert [it["id"] for it in again["data"]] == [it["id"] for it in page["data"]]
    newest = http.get(f"/v1/responses/{r2.id}/input_items", params={"limit": 1}).json()
    assert newest["data"] == [page["data"][-1]] and newest["has_more"] is True
    rest = http.get(f"/v1/responses/{r2.id}/input_items", params={"after": newest["last_id"]}).json()
    assert [it["id"] for it in rest["data"]] == [it["id"] for it in reversed(page["data"][:-1])]
    if hasattr(client.responses, "input_items"):  # the SDK's pager reads the same pages
        assert [it.id for it in client.responses.input_items.list(r2.id, order="asc")] == \
            [it["id"] for it in page["data"]]
    assert http.get("/v1/responses/resp_nope/input_items").status_code == 404
    bad = http.get(f"/v1/responses/{r2.id}/input_items", params={"after": "item_nope"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "after"
    assert http.get(f"/v1/responses/{r2.id}/input_items", params={"limit": 0}).status_code in (400, 422)


def test_input_tokens_counts_what_create_would_render(client, http, engine):
    """POST /v1/responses/input_tokens: the prompt a create request with the same fields renders, counted (the
    engine saw exactly that many tokens), a stored previous_response_id included; no engine request made."""
    body = {"model": MODEL, "input": "[[greet]]", "instructions": "Be kind.", "tools": TOOLS}
    seen = len(engine.requests)
    counted = http.post("/v1/responses/input_tokens", json=body).json()
    assert counted["object"] == "response.input_tokens" and len(engine.requests) == seen
    r = client.responses.create(**body)
    assert counted["input_tokens"] == len(engine.requests[-1].prompt_token_ids) == r.usage.input_tokens
    follow = {"previous_response_id": r.id, "input": "[[greet]] more", "tools": TOOLS}
    chained = http.post("/v1/responses/input_tokens", json=follow).json()["input_tokens"]
    client.responses.create(model=MODEL, **follow)
    assert chained == len(engine.requests[-1].prompt_token_ids) > counted["input_tokens"]
    missing = http.post("/v1/responses/input_tokens", json={"previous_response_id": "resp_nope", "input": "x"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "previous_response_id"
    assert http.post("/v1/responses/input_tokens", json={"model": "nope", "input": "x"}).status_code in (400, 404)
