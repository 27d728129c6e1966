"""Anthropic context management against a live server over the scripted engine, through the `anthropic` SDK's
beta Messages: tool-result and thinking clearing (`context_management.edits`, reported as `applied_edits`),
compaction blocks replayed, token counts before and after."""

from __future__ import annotations

import json

import anthropic
import pytest
from server_live import MODEL, prompt_of
from server_scripts import NO_THINK

from hinfer.server import anthropic_context as ac
from hinfer.server import compaction
from hinfer.server.compaction import SUMMARY_HEAD
from hinfer.server.schemas_anthropic import Message

BETA = ["context-management-2025-06-27"]
TOOL = {"name": "read", "description": "Read a file", "input_schema": {"type": "object",
                                                                        "properties": {"path": {"type": "string"}}}}
GREP = {"name": "grep", "description": "Search", "input_schema": {"type": "object",
                                                                   "properties": {"q": {"type": "string"}}}}


def tool_turns(n: int, name: str = "read") -> list[dict]:
    """A user request, then n tool round trips (each result a distinct long text), then the next request."""
    out: list[dict] = [{"role": "user", "content": "look at the files"}]
    for i in range(n):
        tool = name if i % 2 == 0 else "grep"
        out.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {i}"},
            {"type": "tool_use", "id": f"toolu_{i}", "name": tool, "input": {"path": f"f{i}.py"}}]})
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"contents of file {i}: " + "x y " * 40}]})
    out.append({"role": "user", "content": "now summarize [[nothink]]"})
    return out


@pytest.fixture(scope="module")
def client(base_url):
    return anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0, timeout=30)


def create(client, messages, edits, **kw):
    return client.beta.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=[TOOL, GREP],
                                       context_management={"edits": edits}, betas=BETA, **kw)


def test_clear_tool_uses_past_the_trigger(client, engine):
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100},
            "keep": {"type": "tool_uses", "value": 1}}
    r = create(client, tool_turns(4), [edit])
    assert r.content[0].text == NO_THINK
    (applied,) = r.context_management.applied_edits
    assert applied.type == ac.CLEAR_TOOL_USES and applied.cleared_tool_uses == 3 and applied.cleared_input_tokens > 100
    prompt = prompt_of(engine)
    assert prompt.count(ac.CLEARED_RESULT) == 3 and "contents of file 3" in prompt
    assert all(f"contents of file {i}" not in prompt for i in range(3))
    assert '\nf0.py\n' in prompt  # the calls stay; only their results went
    assert r.usage.input_tokens == len(engine.requests[-1].prompt_token_ids)


def test_clear_tool_uses_under_the_trigger_changes_nothing(client, engine):
    r = create(client, tool_turns(4), [{"type": ac.CLEAR_TOOL_USES}])  # default trigger: 100,000 tokens
    assert r.context_management.applied_edits == []
    assert ac.CLEARED_RESULT not in prompt_of(engine) and "contents of file 0" in prompt_of(engine)


def test_clear_tool_uses_by_tool_count_with_exclusions_and_inputs(client, engine):
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 3}, "keep": {"type": "tool_uses",
            "value": 1}, "exclude_tools": ["grep"], "clear_tool_inputs": True}  # fmt: skip
    r = create(client, tool_turns(5), [edit])
    (applied,) = r.context_management.applied_edits
    assert applied.cleared_tool_uses == 2  # uses 0 and 2 (read); 1 and 3 are grep's, 4 is kept
    prompt = prompt_of(engine)
    assert "contents of file 1" in prompt and "contents of file 3" in prompt and "contents of file 4" in prompt
    assert '\nf0.py\n' not in prompt and '\nf2.py\n' not in prompt and '\nf1.py\n' in prompt


def test_clear_at_least_holds_a_small_clearing_back(client, engine):
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100},
            "clear_at_least": {"type": "input_tokens", "value": 100_000}}
    r = create(client, tool_turns(4), [edit])
    assert r.context_management.applied_edits == [] and ac.CLEARED_RESULT not in prompt_of(engine)


def test_streamed_message_delta_carries_the_applied_edits(client):
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100}}
    with client.beta.messages.stream(model=MODEL, max_tokens=64, messages=tool_turns(4), tools=[TOOL, GREP],
                                     context_management={"edits": [edit]}, betas=BETA) as s:
        final = s.get_final_message()
    assert [(a.type, a.cleared_tool_uses) for a in final.context_management.applied_edits] == [
        (ac.CLEAR_TOOL_USES, 1)]


def test_count_tokens_reports_the_count_before(client):
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100}}
    r = client.beta.messages.count_tokens(model=MODEL, messages=tool_turns(4), tools=[TOOL, GREP],
                                          context_management={"edits": [edit]}, betas=BETA)
    plain = client.messages.count_tokens(model=MODEL, messages=tool_turns(4), tools=[TOOL, GREP])
    assert r.context_management.original_input_tokens == plain.input_tokens > r.input_tokens


def test_compaction_block_replayed(client, engine):
    messages = [
        {"role": "user", "content": "an old request"},
        {"role": "assistant", "content": "an old answer"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "THE SUMMARY"},
                                          {"type": "text", "text": "after it"}]},
        {"role": "user", "content": "next [[nothink]]"},
    ]
    r = client.beta.messages.create(model=MODEL, max_tokens=32, messages=messages, betas=["compact-2026-01-12"])
    assert r.content[0].text == NO_THINK and r.context_management is None
    prompt = prompt_of(engine)
    assert "an old" not in prompt and "more" not in prompt
    assert f"<|im_start|>user\n{SUMMARY_HEAD}THE SUMMARY<|im_end|>\n<|im_start|>assistant\n" in prompt
    assert "after it" in prompt and prompt.index("THE SUMMARY") < prompt.index("after it") < prompt.index("next")


def test_failed_compaction_block_is_a_no_op(client, engine):
    messages = [{"role": "user", "content": "keep me"},
                {"role": "assistant", "content": [{"type": "compaction", "content": None},
                                                  {"type": "text", "text": "answer"}]},
                {"role": "user", "content": "go [[nothink]]"}]
    client.beta.messages.create(model=MODEL, max_tokens=32, messages=messages)
    assert "keep me" in prompt_of(engine) and SUMMARY_HEAD not in prompt_of(engine)


def test_compact_edit_under_its_trigger_changes_nothing(client, engine):
    n = len(engine.requests)
    r = create(client, tool_turns(2), [{"type": ac.COMPACT}])  # default trigger: 150,000 tokens
    assert r.context_management.applied_edits == [] and r.content[0].text == NO_THINK
    assert len(engine.requests) == n + 1 and r.usage.iterations is None


COMPACT = {"type": ac.COMPACT, "trigger": {"type": "input_tokens", "value": 100}, "instructions": "[[nothink]]"}


def test_compaction_summarizes_then_answers_from_the_summary(client, engine):
    n = len(engine.requests)
    r = create(client, tool_turns(3), [COMPACT])
    assert len(engine.requests) == n + 2  # the summary, then the answer
    summary_prompt = engine.tokenizer.decode(engine.requests[-2].prompt_token_ids, skip_special_tokens=False)
    assert "contents of file 2" in summary_prompt and "<tools>" not in summary_prompt
    assert summary_prompt.endswith(compaction.PROMPT + "\n\n[[nothink]]<|im_end|>\n<|im_start|>assistant\n"
                                   "<think>\n\n</think>\n\n")
    assert r.content[0].type == "compaction" and r.content[0].content == NO_THINK
    assert [b.type for b in r.content[1:]] and all(b.type != "compaction" for b in r.content[1:])
    answer_prompt = prompt_of(engine)
    assert f"<|im_start|>user\n{SUMMARY_HEAD}{NO_THINK}<|im_end|>" in answer_prompt
    assert "contents of file" not in answer_prompt and "<tools>" in answer_prompt  # the tools are back
    comp, msg = r.usage.iterations
    assert comp.type == "compaction" and msg.type == "message" and comp.output_tokens > 0
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == len(engine.requests[-1].prompt_token_ids)
    # the next request replays the block: the same context as the answer had, then the new turn
    nxt = [*tool_turns(3), {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
           {"role": "user", "content": "and then? [[nothink]]"}]
    client.beta.messages.create(model=MODEL, max_tokens=16, messages=nxt, tools=[TOOL, GREP], betas=BETA)
    assert prompt_of(engine).startswith(answer_prompt.removesuffix("<|im_start|>assistant\n<think>\n\n</think>\n\n"))


def test_compaction_streamed(client, engine):
    with client.beta.messages.stream(model=MODEL, max_tokens=64, messages=tool_turns(3), tools=[TOOL, GREP],
                                     context_management={"edits": [COMPACT]}, betas=BETA) as s:
        final = s.get_final_message()
    assert final.content[0].type == "compaction" and final.content[0].content == NO_THINK
    assert len(final.content) > 1 and final.usage.iterations[0].type == "compaction"


@pytest.mark.parametrize("stream", [False, True])
def test_compaction_paused(http, engine, stream):
    n = len(engine.requests)
    body = {"model": MODEL, "max_tokens": 64, "messages": tool_turns(3), "tools": [TOOL, GREP], "stream": stream,
            "context_management": {"edits": [{**COMPACT, "pause_after_compaction": True}]}}
    r = http.post("/v1/messages", json=body)
    assert r.status_code == 200 and len(engine.requests) == n + 1  # the summary only
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"]
        assert events[2]["delta"] == {"type": "compaction_delta", "content": NO_THINK}
        assert events[4]["delta"]["stop_reason"] == "compaction"
    else:
        m = r.json()
        assert m["content"] == [{"type": "compaction", "content": NO_THINK}] and m["stop_reason"] == "compaction"
        assert m["usage"]["iterations"][0]["type"] == "compaction" and m["context_management"] == {"applied_edits": []}


@pytest.mark.parametrize("cm, param", [
    ({"edits": [{"type": "clear_everything"}]}, "context_management.edits.0.type"),
    ({"edits": "x"}, "context_management"),
    ({"edits": [{"type": ac.CLEAR_TOOL_USES, "keep": {"type": "tool_uses", "value": -1}}]},
     "context_management.edits.0.keep"),
    ({"edits": [{"type": ac.CLEAR_TOOL_USES, "exclude_tools": "read"}]}, "context_management.edits.0.exclude_tools"),
    ({"edits": [{"type": ac.CLEAR_THINKING, "keep": {"type": "turns", "value": 1}}]},
     "context_management.edits.0.keep"),
    ({"edits": [{"type": ac.COMPACT, "pause_after_compaction": "yes"}]},
     "context_management.edits.0.pause_after_compaction"),
    ({"edits": [{"type": ac.COMPACT, "trigger": {"type": "tool_uses", "value": 3}}]},
     "context_management.edits.0.trigger"),
])
def test_bad_context_management_is_a_400(http, engine, cm, param):
    n = len(engine.requests)
    r = http.post("/v1/messages", json={"model": MODEL, "max_tokens": 8, "context_management": cm,
                                        "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    assert param in r.json()["error"]["message"] or r.json()["error"].get("param") == param
    assert len(engine.requests) == n


def test_clear_thinking_keeps_the_last_turns():
    msgs = [Message(role="user", content="q")]
    for i in range(3):
        msgs.append(Message(role="assistant", content=[{"type": "thinking", "thinking": f"t{i}", "signature": "s"},
                                                       {"type": "text", "text": f"a{i}"}]))
        msgs.append(Message(role="user", content="q"))
    out, n = ac.clear_thinking(msgs, 1)
    assert n == 2 and [b["type"] for b in out[1].content] == ["text"] and out[5].content[0]["thinking"] == "t2"
    assert ac.clear_thinking(msgs, None) == (msgs, 0)
    assert ac.clear_thinking(msgs, 0)[1] == 3
