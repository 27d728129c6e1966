"""Compaction of a Responses conversation against a live server over the scripted engine: Codex CLI's remote
compaction (a streamed `POST /v1/responses` whose input ends in `compaction_trigger`, answered by exactly one
`compaction` item), the item replayed in a later request, and OpenAI's `POST /v1/responses/compact` through the
`openai` SDK."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from server_live import MODEL, prompt_of
from server_scripts import CODEX_HISTORY, NO_THINK, RESPONSES_TOOLS

from hinfer.server import compaction

TOOLS = RESPONSES_TOOLS
TRIGGER = {"type": "compaction_trigger"}
# a Codex-shaped history: a user turn, a tool call and its output, the assistant's answer, the next user turn
HISTORY = CODEX_HISTORY


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)


def sse_events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


def test_trigger_streams_exactly_one_compaction_item(http, engine):
    body = {"model": MODEL, "input": [*HISTORY, TRIGGER], "tools": TOOLS, "stream": True, "store": False,
            "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high"}}
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["status"] == "completed" and len(final["output"]) == 1
    item = final["output"][0]
    assert item == events[3]["item"] and item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert compaction.SUMMARY.decode(item["encrypted_content"]) == NO_THINK
    # the summary request: the conversation, then the compaction prompt; no tools shown, thinking off
    prompt = prompt_of(engine)
    assert "18 C, light rain" in prompt and "<tools>" not in prompt
    assert prompt.endswith(compaction.PROMPT + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert engine.requests[-1].sampling.max_tokens <= 4096  # --compaction-max-tokens' default
    assert final["usage"]["input_tokens"] == len(engine.requests[-1].prompt_token_ids)
    assert final["usage"]["output_tokens"] > 0


def test_compaction_item_replayed_as_summary(client, engine):
    r = client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False)
    assert [i.type for i in r.output] == ["compaction"]
    replay = [HISTORY[0], r.output[0].model_dump(exclude_none=True),
              {"type": "message", "role": "user", "content": "go on [[nothink]]"}]
    r2 = client.responses.create(model=MODEL, input=replay, tools=TOOLS, store=False)
    assert r2.status == "completed"
    prompt = prompt_of(engine)
    assert "<|im_start|>user\n" + compaction.SUMMARY_HEAD + NO_THINK + "<|im_end|>" in prompt
    assert "18 C, light rain" not in prompt and "<tools>" in prompt  # a normal turn again


def test_foreign_compaction_item_is_a_note(client, engine):
    foreign = {"type": "compaction", "id": "cmp_x", "encrypted_content": "gAAAAABforeign-opaque-state"}
    r = client.responses.create(model=MODEL, input=[foreign, {"role": "user", "content": "hi [[nothink]]"}],
                                store=False)
    assert r.status == "completed"
    assert "<|im_start|>user\n" + compaction.UNREADABLE + "<|im_end|>" in prompt_of(engine)


@pytest.mark.parametrize("items, param", [
    ([TRIGGER, *HISTORY], "input.0"),
    ([*HISTORY[:2], TRIGGER, *HISTORY[2:], TRIGGER], "input.2"),
    ([TRIGGER], "input"),
])
def test_misplaced_trigger_is_a_400(http, engine, items, param):
    n = len(engine.requests)
    r = http.post("/v1/responses", json={"model": MODEL, "input": items})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert len(engine.requests) == n  # nothing ran


def test_input_tokens_counts_the_compaction_prompt(http, engine):
    body = {"model": MODEL, "input": [*HISTORY, TRIGGER], "tools": TOOLS}
    counted = http.post("/v1/responses/input_tokens", json=body).json()["input_tokens"]
    r = http.post("/v1/responses", json={**body, "store": False})
    assert r.status_code == 200 and counted == r.json()["usage"]["input_tokens"]


def test_compact_endpoint_with_the_sdk(client, engine):
    r = client.responses.compact(model=MODEL, input=HISTORY, instructions="You are a coding agent.")
    assert r.object == "response.compaction" and r.id.startswith("resp_")
    assert [(i.type, getattr(i, "role", None)) for i in r.output] == [("message", "user"), ("message", "user"),
                                                                      ("compaction", None)]
    assert r.output[0].content[0].text == "weather in Paris, please"
    assert r.output[1].content[0].type == "input_text" and r.output[1].content[0].text == "and tomorrow? [[nothink]]"
    assert compaction.SUMMARY.decode(r.output[2].encrypted_content) == NO_THINK
    assert r.usage.input_tokens == len(engine.requests[-1].prompt_token_ids) and r.usage.output_tokens > 0
    assert prompt_of(engine).startswith("<|im_start|>system\nYou are a coding agent.")
    # the next turn sends the compacted output as its whole input
    # (the SDK types output messages as the assistant's: its dump warns about the user messages' input_text parts)
    nxt = [i.model_dump(exclude_none=True, warnings=False) for i in r.output] + [{"role": "user", "content": "next [[nothink]]"}]
    assert client.responses.create(model=MODEL, input=nxt, store=False).status == "completed"
    assert compaction.SUMMARY_HEAD + NO_THINK in prompt_of(engine)


def test_compact_endpoint_continues_a_stored_response(client, engine):
    first = client.responses.create(model=MODEL, input="remember the number 7 [[nothink]]",
                                    reasoning={"effort": "none"})
    r = client.responses.compact(model=MODEL, previous_response_id=first.id)
    assert [i.type for i in r.output] == ["message", "compaction"]
    assert "remember the number 7" in prompt_of(engine) and NO_THINK in prompt_of(engine)


@pytest.mark.parametrize("field", ["stream", "background"])
def test_compact_endpoint_refuses_stream_and_background(http, field):
    r = http.post("/v1/responses/compact", json={"model": MODEL, "input": HISTORY, field: True})
    assert r.status_code == 400 and r.json()["error"]["param"] == field


def test_compact_endpoint_checks_its_input(http):
    r = http.post("/v1/responses/compact", json={"model": MODEL, "input": [{"type": "bogus"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input.0.type"
    bad_model = {"model": "no-such-model", "input": HISTORY}
    r, create = http.post("/v1/responses/compact", json=bad_model), http.post("/v1/responses", json=bad_model)
    assert r.status_code == create.status_code >= 400 and r.json()["error"] == create.json()["error"]


def test_trigger_in_a_conversation_keeps_the_compaction_not_the_trigger(client, engine):
    conv = client.conversations.create(items=HISTORY)
    r = client.responses.create(model=MODEL, conversation=conv.id, input=[TRIGGER])
    assert [i.type for i in r.output] == ["compaction"]
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.type for i in items][-2:] == ["message", "compaction"] and len(items) == len(HISTORY) + 1
    after = client.responses.create(model=MODEL, conversation=conv.id, input="go on [[nothink]]")
    assert after.status == "completed" and compaction.SUMMARY_HEAD + NO_THINK in prompt_of(engine)


def test_a_cut_summary_is_still_a_completed_compaction(client, engine):
    r = client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER], max_output_tokens=3, store=False)
    assert r.status == "completed" and [i.type for i in r.output] == ["compaction"]
    summary = compaction.SUMMARY.decode(r.output[0].encrypted_content)
    assert summary.endswith("[This summary was cut at 3 tokens.]") and engine.requests[-1].sampling.max_tokens == 3
