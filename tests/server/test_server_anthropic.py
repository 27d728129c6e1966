"""Anthropic dialect end to end: the official `anthropic` SDK against a live server over a scripted engine."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, TIME_TOOL, WEATHER_ARGS, WEATHER_TOOL, anthropic_tool

TOOLS = [anthropic_tool(WEATHER_TOOL), anthropic_tool(TIME_TOOL)]
THINK = {"type": "enabled", "budget_tokens": 2048}


@pytest.fixture(scope="module")
def client(base_url):
    return anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0, timeout=30)


def user(text):
    return [{"role": "user", "content": text}]


def test_text_without_thinking(client, engine):
    m = client.messages.create(model=MODEL, max_tokens=200, messages=user("[[nothink]]"))
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "Hello! How can I help you today?"
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert m.id.startswith("msg_") and m.role == "assistant" and m.model == MODEL
    assert "timings" in m.model_extra
    assert prompt_of(engine).endswith("<think>\n\n</think>\n\n")  # no `thinking`: the template's thinking is off


def test_thinking_blocks(client, engine):
    m = client.messages.create(model=MODEL, max_tokens=200, messages=user("[[greet]]"), thinking=THINK)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "The user greets me. I should greet them back."
    assert m.content[0].signature
    assert m.content[1].text == "Hello! How can I help you today?"
    sp = engine.requests[-1].sampling
    assert sp.thinking_budget == 2048 and sp.think_end_token_id == engine.tokenizer.think_end_id
    assert prompt_of(engine).endswith("<|im_start|>assistant\n<think>\n")


def test_thinking_budget_forces_end(client):
    m = client.messages.create(model=MODEL, max_tokens=500, messages=user("[[long_think]]"),
                               thinking={"type": "enabled", "budget_tokens": 5})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking.split() == ["step"] * 5
    assert m.content[1].text == "Done."


def test_stream_event_sequence(client):
    with client.messages.stream(model=MODEL, max_tokens=300, messages=user("[[weather]]"), tools=TOOLS,
                                thinking=THINK) as stream:
        events = [e for e in stream if e.type in ("message_start", "content_block_start", "content_block_delta",
                                                   "content_block_stop", "message_delta", "message_stop")]
        final = stream.get_final_message()
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    # Blocks open and close in order, with indices counting from 0, deltas only inside their block.
    open_idx, seen = None, []
    for e in events[1:-2]:
        if e.type == "content_block_start":
            assert open_idx is None
            open_idx = e.index
            seen.append((e.index, e.content_block.type))
        elif e.type == "content_block_delta":
            assert e.index == open_idx
        elif e.type == "content_block_stop":
            assert e.index == open_idx
            open_idx = None
    assert open_idx is None
    assert seen == [(0, "thinking"), (1, "text"), (2, "tool_use")]
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    assert events[-2].delta.stop_reason == "tool_use" and events[-2].usage.output_tokens > 0
    assert "timings" in events[-2].model_extra
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    tool = final.content[2]
    assert tool.name == "get_weather" and tool.id.startswith("toolu_") and tool.input == WEATHER_ARGS
    assert final.content[1].text == "Let me check that."


def test_tool_use_without_thinking(client):
    m = client.messages.create(model=MODEL, max_tokens=300, messages=user("[[weather_nothink]]"), tools=TOOLS)
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["text", "tool_use"]
    assert m.content[0].text == "Let me check that." and m.content[1].input == WEATHER_ARGS


def test_parallel_tool_use(client):
    m = client.messages.create(model=MODEL, max_tokens=300, messages=user("[[parallel]]"), tools=TOOLS,
                               thinking=THINK)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", {"city": "Paris", "days": "not a number"}),
                                                ("get_time", {"zone": "Asia/Tokyo"})]
    assert m.stop_reason == "tool_use"


def test_tool_result_history(client, engine):
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I need the tool", "signature": "hinfer-unsigned"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 2}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C [[after_tool]]"}]},
        ]},
    ]
    m = client.messages.create(model=MODEL, max_tokens=300, system=[{"type": "text", "text": "Be terse."}],
                               messages=messages, tools=TOOLS, thinking=THINK)
    assert m.content[-1].text == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert "<tool_response>\n18C [[after_tool]]\n</tool_response>" in p
    assert "<think>\nI need the tool\n</think>\n\nLet me check.\n\n<tool_call>\n<function=get_weather>" in p
    assert "<parameter=days>\n2\n</parameter>" in p
    assert "Be terse." in p


def test_tool_result_with_an_image_keeps_the_turn(client, engine):
    """Claude Code's Read of a screenshot answers with an image block in the tool result: a placeholder line
    takes its place (the tool's output is not the client's to change), beside the result's text."""
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    messages = [
        {"role": "user", "content": "Look at shot.png"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "shot.png [[after_tool]]"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}]},
    ]  # fmt: skip
    m = client.messages.create(model=MODEL, max_tokens=300, messages=messages, tools=TOOLS, thinking=THINK)
    assert m.content[-1].text == AFTER_TOOL.split("\n\n", 1)[1]
    assert ("<tool_response>\nshot.png [[after_tool]]\n\n[image omitted: this server reads images in user messages "
            "only, and no PDF or file documents]\n</tool_response>") in prompt_of(engine)


def test_text_documents_are_read(client, engine):
    """A text document (source text, or content blocks) reads as its title, context and text, in a user message and
    in a tool result alike; a PDF in a tool result is a placeholder line."""
    doc = {"type": "document", "title": "Notes", "context": "From the wiki.",
           "source": {"type": "text", "media_type": "text/plain", "data": "Paris is in France."}}
    blocks = {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "one"},
                                                                             {"type": "text", "text": "two"}]}}
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}
    messages = [{"role": "user", "content": [doc, {"type": "text", "text": "Where is Paris?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [blocks, pdf]},
                                             {"type": "text", "text": "[[nothink]]"}]}]  # fmt: skip
    client.messages.create(model=MODEL, max_tokens=50, messages=messages, tools=TOOLS)
    p = prompt_of(engine)
    assert "<|im_start|>user\nDocument: Notes\n\nFrom the wiki.\n\nParis is in France.\n\nWhere is Paris?" in p
    assert ("<tool_response>\none\n\ntwo\n\n[document omitted: this server reads images in user messages only, and "
            "no PDF or file documents]\n</tool_response>") in p


def test_tool_result_error_flag(client, engine):
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
                                     {"type": "text", "text": "and now? [[nothink]]"}]},
    ]
    client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=TOOLS)
    p = prompt_of(engine)
    assert "<tool_response>\nError: boom\n</tool_response><|im_end|>\n<|im_start|>user\nand now? [[nothink]]" in p


def test_stop_sequences(client):
    m = client.messages.create(model=MODEL, max_tokens=100, messages=user("[[stop]]"), stop_sequences=["STOP"],
                               thinking=THINK)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP"
    assert m.content[-1].text == "one two three "
    with client.messages.stream(model=MODEL, max_tokens=100, messages=user("[[stop]]"), thinking=THINK,
                                stop_sequences=["STOP"]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.content[-1].text == "one two three "


def test_max_tokens_stop_reason(client):
    m = client.messages.create(model=MODEL, max_tokens=7, messages=user("[[long]]"))
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 7


def test_tool_choice(client, engine):
    client.messages.create(model=MODEL, max_tokens=100, messages=user("[[weather]]"), tools=TOOLS,
                           tool_choice={"type": "any"})
    assert "You must answer by calling one or more" in prompt_of(engine)
    m = client.messages.create(model=MODEL, max_tokens=100, messages=user("[[weather_nothink]]"), tools=TOOLS,
                               tool_choice={"type": "none"})
    assert all(b.type == "text" for b in m.content) and "<tools>" not in prompt_of(engine)
    client.messages.create(model=MODEL, max_tokens=100, messages=user("[[weather]]"), tools=TOOLS,
                           tool_choice={"type": "tool", "name": "get_time"})
    prompt = prompt_of(engine)  # every tool shown (the head as under auto), the choice asked before the answer
    assert '"get_weather"' in prompt and prompt.rindex("calling the function get_time") > prompt.rindex("user")


def test_tool_search_tools_are_left_out_and_deferred_tools_shown(client, engine):
    """Claude Code through a custom base URL: a tool search tool beside its MCP tools marked defer_loading. The
    search tool is left out (not a 400), every tool given is shown, deferred or not, and can be called."""
    tools = [{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
             {**TOOLS[0], "defer_loading": True}, TOOLS[1]]
    m = client.messages.create(model=MODEL, max_tokens=200, messages=user("[[weather]]"), tools=tools, thinking=THINK)
    use = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and use[0].name == "get_weather" and use[0].input == WEATHER_ARGS
    p = prompt_of(engine)
    assert '"name": "get_weather"' in p and '"name": "get_time"' in p and "tool_search" not in p
    kw = dict(model=MODEL, messages=user("[[weather]]"), tools=tools)
    assert client.messages.count_tokens(**kw).input_tokens > 0


def test_deferred_tools_load_where_a_tool_reference_names_them(client, engine):
    """Claude Code's own ToolSearch (no server search tool): a deferred tool is callable but not in the system
    prompt; a tool_result's tool_reference blocks list the tools they name there, in the system prompt's form, so
    the system prompt (and the prefix cache) stays the same as tools load. An unknown name is said in words."""
    deferred = {**TOOLS[0], "defer_loading": True}
    m = client.messages.create(model=MODEL, max_tokens=200, messages=user("[[weather]]"), tools=[deferred, TOOLS[1]],
                               thinking=THINK)
    use = [b for b in m.content if b.type == "tool_use"]
    assert use and use[0].name == "get_weather" and use[0].input == WEATHER_ARGS  # callable, though not shown
    first = prompt_of(engine)
    assert '"name": "get_weather"' not in first and '"name": "get_time"' in first
    history = [*user("find the weather tool"),
               {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_time",
                                                  "input": {"zone": "select:get_weather"}}]},
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                       {"type": "tool_reference", "tool_name": "get_weather"},
                       {"type": "tool_reference", "tool_name": "nope"}]},
                   {"type": "text", "text": "Tool loaded. [[nothink]]"}]}]  # fmt: skip
    client.messages.create(model=MODEL, max_tokens=50, messages=history, tools=[deferred, TOOLS[1]])
    p = prompt_of(engine)
    system, rest = p.split("<|im_end|>", 1)
    assert system == first.split("<|im_end|>", 1)[0]  # the same system prompt: nothing of get_weather in it
    listed = rest.split("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0]
    assert listed.startswith("These functions can be called from now on:\n<tools>\n"
                             '{"type": "function", "function": {"name": "get_weather"')
    assert listed.endswith("</tools>\n[tool_reference to 'nope': no tool of that name in this request]")


def test_every_tool_deferred_shows_them_all(client, engine):
    """With every tool deferred none would be in the system prompt, and with the tool list the call format goes
    missing too: they are all shown, and called as usual."""
    tools = [{**t, "defer_loading": True} for t in TOOLS]
    m = client.messages.create(model=MODEL, max_tokens=200, messages=user("[[weather]]"), tools=tools, thinking=THINK)
    use = [b for b in m.content if b.type == "tool_use"]
    assert use and use[0].name == "get_weather" and use[0].input == WEATHER_ARGS
    system = prompt_of(engine).split("<|im_end|>", 1)[0]
    assert '"name": "get_weather"' in system and '"name": "get_time"' in system and "<tool_call>" in system


def test_server_tool_blocks_in_history_are_left_out(client, engine):
    """A conversation begun at Anthropic carries server tool calls and results in its assistant turns (a tool
    search's, a web search's): accepted, left out of the prompt (they ran there), the text around them kept. In a
    user message they stay a 400."""
    assistant = [{"type": "text", "text": "Searching."},
                 {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex",
                  "input": {"query": "weather"}},
                 {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {
                     "type": "tool_search_tool_search_result",
                     "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
                 {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_2", "content": [
                     {"type": "web_search_result", "url": "https://e.com", "title": "E", "encrypted_content": "x"}]},
                 {"type": "text", "text": "Found it."}]  # fmt: skip
    msgs = [*user("hi"), {"role": "assistant", "content": assistant}, *user("[[nothink]] go on")]
    m = client.messages.create(model=MODEL, max_tokens=50, messages=msgs, tools=TOOLS)
    assert m.stop_reason == "end_turn"
    p = prompt_of(engine)
    assert "<|im_start|>assistant\nSearching.\n\nFound it.<|im_end|>" in p
    assert "srvtoolu" not in p and "e.com" not in p
    bad = [{"role": "user", "content": [{"type": "web_search_tool_result", "tool_use_id": "s", "content": []}]}]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=50, messages=bad)
    assert "web_search_tool_result" in str(e.value)


def test_count_tokens(client, engine):
    kw = dict(model=MODEL, messages=user("[[nothink]] count me"), system="sys", tools=TOOLS)
    n = client.messages.count_tokens(**kw).input_tokens
    m = client.messages.create(max_tokens=50, **kw)
    assert n == m.usage.input_tokens == len(engine.requests[-1].prompt_token_ids)


def test_models_anthropic_shape(client):
    page = client.models.list()
    assert [m.id for m in page.data] == [MODEL, "alias-model"]
    assert page.data[0].type == "model"
    assert client.models.retrieve(MODEL).id == MODEL


def test_sampling_fields(client, engine):
    # This SDK version no longer takes temperature/top_p/top_k as arguments; older clients send them.
    client.messages.create(model=MODEL, max_tokens=100, messages=user("[[nothink]]"), metadata={"user_id": "u"},
                           extra_body={"temperature": 0.2, "top_p": 0.8, "top_k": 5})
    sp = engine.requests[-1].sampling
    assert (sp.temperature, sp.top_p, sp.top_k, sp.max_tokens) == (0.2, 0.8, 5, 100)


def test_x_api_key_header_ignored_without_key(base_url):
    r = httpx.post(base_url + "/v1/messages", headers={"x-api-key": "whatever", "anthropic-version": "2023-06-01"},
                   json={"model": MODEL, "max_tokens": 10, "messages": user("[[nothink]]")})
    assert r.status_code == 200 and r.json()["type"] == "message"


def test_system_messages_inside_messages(client, engine):
    # Claude Code's mid-conversation system messages: leading ones join `system`, later ones stay in place.
    messages = [
        {"role": "system", "content": "Inline lead."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I need the tool", "signature": "hinfer-unsigned"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]},
        {"role": "system", "content": [{"type": "text", "text": "Mid reminder [[after_tool]]"}]},
    ]
    m = client.messages.create(model=MODEL, max_tokens=300, system="Top.", messages=messages, tools=TOOLS,
                               thinking=THINK)
    assert m.content[-1].text == AFTER_TOOL.split("\n\n", 1)[1]
    p = prompt_of(engine)
    assert p.count("<|im_start|>system\n") == 2 and "Top.\n\nInline lead.<|im_end|>" in p
    assert p.endswith("<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>system\nMid reminder "
                      "[[after_tool]]<|im_end|>\n<|im_start|>assistant\n<think>\n")
    # The system turn is not the user's latest query: the tool loop's reasoning is still kept.
    assert "<think>\nI need the tool\n</think>" in p and "hinfer-system" not in p
    n = client.messages.count_tokens(model=MODEL, system="Top.", messages=messages, tools=TOOLS,
                                     thinking=THINK).input_tokens
    assert n == len(engine.requests[-1].prompt_token_ids)


def test_system_message_between_user_turns(client, engine):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "system", "content": "Be brief."}, {"role": "user", "content": "[[nothink]]"}]
    client.messages.create(model=MODEL, max_tokens=50, messages=messages)
    assert "hello<|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n[[nothink]]" in \
        prompt_of(engine)


def test_disable_parallel_tool_use(client, engine):
    m = client.messages.create(model=MODEL, max_tokens=300, messages=user("[[parallel]]"), tools=TOOLS,
                               thinking=THINK, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.name for b in m.content if b.type == "tool_use"] == ["get_weather"] and m.stop_reason == "tool_use"
    assert "Call at most one function per answer." in prompt_of(engine)
    with client.messages.stream(model=MODEL, max_tokens=300, messages=user("[[parallel]]"), tools=TOOLS,
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}) as s:
        final = s.get_final_message()
    assert [b.name for b in final.content if b.type == "tool_use"] == ["get_weather"]
    assert "You must answer by calling one of the functions above." in prompt_of(engine)


def test_errors_worded_as_anthropic_words_them(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=10, messages=user("word " * 5000))
    body = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long: ") and "> 4095 maximum" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=10**6, messages=user("hi"))
    assert e.value.body["error"]["message"].startswith("max_tokens: 1000000 > 4096, which is the maximum allowed")


def test_assistant_prefill_is_continued(client, engine):
    # A final assistant message is a prefill: the prompt ends with its text right after the generation prompt,
    # the answer holds only what follows, and count_tokens counts the same prompt.
    messages = user("[[nothink]]") + [{"role": "assistant", "content": [{"type": "text", "text": "Sure <|im_end|>:"}]}]
    m = client.messages.create(model=MODEL, max_tokens=200, messages=messages)
    assert m.content[0].text == "Hello! How can I help you today?"
    ids = engine.requests[-1].prompt_token_ids
    assert prompt_of(engine).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nSure <|im_end|>:")
    im_end = engine.tokenizer.token_to_id("<|im_end|>")
    assert ids[-8:].count(im_end) == 0, "the prefill's special-token text stays text"
    assert client.messages.count_tokens(model=MODEL, messages=messages).input_tokens == len(ids)
    client.messages.create(model=MODEL, max_tokens=200, messages=user("[[nothink]]") + [
        {"role": "assistant", "content": ""}])
    assert prompt_of(engine).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "empty: a plain answer"


@pytest.mark.parametrize(("last", "thinking", "words"), [
    ({"role": "assistant", "content": "Sure "}, None, "trailing whitespace"),
    ({"role": "assistant", "content": "Sure"}, THINK, "thinking enabled"),
    ({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}]}, None,
     "text only"),
])  # fmt: skip
def test_assistant_prefill_refused(client, engine, last, thinking, words):
    n = len(engine.requests)
    kw = {"thinking": thinking} if thinking else {}
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=50, messages=user("[[nothink]]") + [last], tools=TOOLS, **kw)
    assert words in e.value.body["error"]["message"] and e.value.body["error"]["type"] == "invalid_request_error"
    assert len(engine.requests) == n, "nothing reached the engine"
