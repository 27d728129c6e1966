"""Server-side compaction of a Responses create request (`context_management: [{"type": "compaction",
"compact_threshold": N}]`) against a live server over the scripted engine: under N a plain response; from N on the
summary run first, its compaction item leading the output, and the answer generated from the summary alone;
streamed, over the WebSocket, in the background, and continued by `previous_response_id` or by the client's own
items; bad entries a 400 that runs and stores nothing."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from server_live import MODEL, prompt_of
from server_scripts import CODEX_HISTORY, NO_THINK, RESPONSES_TOOLS
from websockets.sync.client import connect

from hinfer.server import compaction
from hinfer.server.responses_compact import default_threshold

TOOLS = RESPONSES_TOOLS
# a Codex-shaped history: a user turn, a tool call and its output, the assistant's answer, the next user turn; its
# [[nothink]] scripts the summary, and the summary alone scripts the answer (the engine's default: reasoning, text)
HISTORY = CODEX_HISTORY
SUMMARY_TURN = "<|im_start|>user\n" + compaction.SUMMARY_HEAD + NO_THINK + "<|im_end|>"
ANSWER = "Default answer."
GENERATION = "<|im_start|>assistant\n<think>\n"  # the prompt's end with thinking on


def body_of(threshold: int | None = None, **extra) -> dict:
    entry = {"type": "compaction"} if threshold is None else {"type": "compaction", "compact_threshold": threshold}
    return {"model": MODEL, "input": HISTORY, "tools": TOOLS, "context_management": [entry], **extra}


def counted(http: httpx.Client, **fields) -> int:
    """The prompt tokens a create request with these fields renders (what the threshold is compared with)."""
    keep = ("input", "tools", "instructions", "previous_response_id", "conversation", "reasoning")
    r = http.post("/v1/responses/input_tokens", json={k: v for k, v in fields.items() if k in keep})
    assert r.status_code == 200, r.text
    return r.json()["input_tokens"]


def sse_events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


def check_compacted(resp: dict, engine, n: int) -> None:
    """`resp` answered by a summary run, then an answer run over the summary alone."""
    assert len(engine.requests) == n + 2
    summary_ids, answer_ids = (r.prompt_token_ids for r in engine.requests[-2:])
    summary_prompt = engine.tokenizer.decode(summary_ids, skip_special_tokens=False)
    assert "18 C, light rain" in summary_prompt and "<tools>" not in summary_prompt  # the whole conversation
    assert summary_prompt.endswith(compaction.PROMPT + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    answer_prompt = prompt_of(engine)
    assert SUMMARY_TURN in answer_prompt and "<tools>" in answer_prompt  # the tools are back
    assert "18 C, light rain" not in answer_prompt and "weather in Paris" not in answer_prompt
    assert resp["status"] == "completed"
    assert [i["type"] for i in resp["output"]] == ["compaction", "reasoning", "message"]
    item = resp["output"][0]
    assert item["id"].startswith("cmp_") and compaction.CONTEXT.decode(item["encrypted_content"]) == NO_THINK
    assert resp["output"][2]["content"][0]["text"] == ANSWER
    usage, summary = resp["usage"], resp["usage"]["compaction"]
    assert summary["input_tokens"] == len(summary_ids) and summary["output_tokens"] > 0
    assert usage["input_tokens"] == len(summary_ids) + len(answer_ids)
    assert usage["output_tokens"] > summary["output_tokens"] and usage["output_tokens_details"]["reasoning_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize("entries", [
    "one over",  # compact_threshold one past the prompt
    [{"type": "compaction"}],  # the default: 80% of the context (4,096 tokens here)
    [{"type": "compaction", "compact_threshold": None}],
    [],
])
def test_under_the_threshold_a_plain_response(http, engine, entries):
    body = body_of(store=False)
    body["context_management"] = [{"type": "compaction", "compact_threshold": counted(http, **body) + 1}] \
        if entries == "one over" else entries  # fmt: skip
    n = len(engine.requests)
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert len(engine.requests) == n + 1 and "compaction" not in r.json()["usage"]
    assert r.json()["output"] and all(i["type"] != "compaction" for i in r.json()["output"])
    assert "18 C, light rain" in prompt_of(engine) and SUMMARY_TURN not in prompt_of(engine)


def test_at_the_threshold_the_summary_then_the_answer_from_it(http, engine):
    body = body_of(store=False)
    body["context_management"][0]["compact_threshold"] = counted(http, **body)
    n = len(engine.requests)
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    check_compacted(r.json(), engine, n)
    assert engine.requests[-2].sampling.max_tokens <= 4096  # --compaction-max-tokens' default


def test_the_default_threshold_compacts_a_long_input(http, engine):
    long_input = [{"role": "user", "content": " ".join(["apple"] * 3400) + " [[nothink]]"}]
    body = {"model": MODEL, "input": long_input, "context_management": [{"type": "compaction"}], "store": False}
    assert counted(http, **body) >= default_threshold(engine.max_context)
    n = len(engine.requests)
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert len(engine.requests) == n + 2 and [i["type"] for i in r.json()["output"]][0] == "compaction"
    assert "apple" not in prompt_of(engine) and SUMMARY_TURN in prompt_of(engine)


def test_streamed_compaction_item_first_then_the_answer(http, engine):
    body = body_of(1, stream=True, store=False)
    n = len(engine.requests)
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    events = sse_events(r)
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.output_item.done"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[2]["output_index"] == events[3]["output_index"] == 0 and events[3]["item"]["type"] == "compaction"
    assert types[4] == "response.output_item.added" and events[4]["item"]["type"] == "reasoning"
    assert types[-1] == "response.completed"
    assert {e["output_index"] for e in events[4:] if "output_index" in e} == {1, 2}  # the answer's items
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in done] == [0, 1, 2]
    final = events[-1]["response"]
    assert final["output"] == [e["item"] for e in done]
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == ANSWER
    check_compacted(final, engine, n)


def test_with_the_sdk_streamed_and_not(base_url, engine):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)
    cm = [{"type": "compaction", "compact_threshold": 1}]
    r = client.responses.create(model=MODEL, input=HISTORY, tools=TOOLS, context_management=cm, store=False)
    assert [i.type for i in r.output] == ["compaction", "reasoning", "message"] and r.output_text == ANSWER
    with client.responses.stream(model=MODEL, input=HISTORY, tools=TOOLS, context_management=cm, store=False) as s:
        final = s.get_final_response()  # the SDK's own accumulation, by output_index
    assert [i.type for i in final.output] == ["compaction", "reasoning", "message"] and final.output_text == ANSWER
    assert final.usage.input_tokens == sum(len(q.prompt_token_ids) for q in engine.requests[-2:])


def test_stored_compaction_continued_by_previous_response_id(http, engine):
    first = http.post("/v1/responses", json=body_of(1, store=True)).json()
    answer_prompt = prompt_of(engine)
    assert [i["type"] for i in first["output"]][0] == "compaction"
    stored = http.get(f"/v1/responses/{first['id']}").json()
    assert stored["output"] == first["output"]
    listed = http.get(f"/v1/responses/{first['id']}/input_items", params={"order": "asc"}).json()["data"]
    assert len(listed) == len(HISTORY)  # the input it answered: the whole conversation
    # the next turn passes only its message; what came before the compaction item is left out
    nxt = {"model": MODEL, "previous_response_id": first["id"], "input": "and then? [[nothink]]", "tools": TOOLS}
    threshold = counted(http, **nxt) + 1
    n = len(engine.requests)
    r = http.post("/v1/responses", json={**nxt, "context_management": [{"type": "compaction",
                                                                         "compact_threshold": threshold}]})
    assert r.status_code == 200 and len(engine.requests) == n + 1, r.text
    prompt = prompt_of(engine)
    assert prompt.startswith(answer_prompt.removesuffix(GENERATION)) and ANSWER in prompt
    assert "18 C, light rain" not in prompt and prompt.index(SUMMARY_TURN) < prompt.index("and then?")
    # stateless chaining: the client appends the output items to its own input, the same prompt
    own = {"model": MODEL, "input": [*HISTORY, *first["output"], {"role": "user", "content": "and then? [[nothink]]"}],
           "tools": TOOLS, "store": False}
    assert http.post("/v1/responses", json=own).status_code == 200 and prompt_of(engine) == prompt


def test_a_compacted_conversation_compacts_again_from_its_summary(http, engine):
    first = http.post("/v1/responses", json=body_of(1, store=True)).json()
    n = len(engine.requests)
    r = http.post("/v1/responses", json={"model": MODEL, "previous_response_id": first["id"], "store": False,
                                         "input": "more [[nothink]]",
                                         "context_management": [{"type": "compaction", "compact_threshold": 1}]})
    assert r.status_code == 200 and len(engine.requests) == n + 2, r.text
    summary_prompt = engine.tokenizer.decode(engine.requests[-2].prompt_token_ids, skip_special_tokens=False)
    assert SUMMARY_TURN in summary_prompt and "18 C, light rain" not in summary_prompt and "more" in summary_prompt
    assert [i["type"] for i in r.json()["output"]][0] == "compaction"


def test_in_a_conversation(http, engine):
    conv = http.post("/v1/conversations", json={"items": HISTORY[:-1]}).json()["id"]
    r = http.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": [HISTORY[-1]], "tools": TOOLS,
                                         "context_management": [{"type": "compaction", "compact_threshold": 1}]})
    assert r.status_code == 200, r.text
    items = http.get(f"/v1/conversations/{conv}/items", params={"order": "asc", "limit": 100}).json()["data"]
    assert [i["type"] for i in items][-4:] == ["message", "compaction", "reasoning", "message"]
    answer_prompt = prompt_of(engine)
    after = http.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": "go on [[nothink]]",
                                             "tools": TOOLS})
    assert after.status_code == 200 and prompt_of(engine).startswith(answer_prompt.removesuffix(GENERATION))


def test_a_trigger_is_answered_as_before(http, engine):
    n = len(engine.requests)
    body = body_of(1, store=False)
    body["input"] = [*HISTORY, {"type": "compaction_trigger"}]
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 200 and len(engine.requests) == n + 1, r.text
    (item,) = r.json()["output"]
    assert compaction.SUMMARY.decode(item["encrypted_content"]) == NO_THINK


def test_over_the_websocket(base_url, engine):
    n = len(engine.requests)
    with connect(base_url.replace("http://", "ws://") + "/v1/responses") as ws:
        ws.send(json.dumps({"type": "response.create", **body_of(1, store=False)}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(json.loads(ws.recv(timeout=30)))
    assert [e["type"] for e in events[:4]] == ["response.created", "response.in_progress",
                                               "response.output_item.added", "response.output_item.done"]
    check_compacted(events[-1]["response"], engine, n)


def test_in_the_background(http, engine):
    n = len(engine.requests)
    r = http.post("/v1/responses", json=body_of(1, background=True))
    assert r.status_code == 200 and r.json()["status"] == "in_progress", r.text
    deadline = time.monotonic() + 20
    while (resp := http.get(f"/v1/responses/{r.json()['id']}").json())["status"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    check_compacted(resp, engine, n)


@pytest.mark.parametrize("cm, param", [
    ({"type": "compaction", "compact_threshold": 100}, "context_management"),
    (["compaction"], "context_management.0"),
    ([{"type": "truncation"}], "context_management.0.type"),
    ([{"compact_threshold": 100}], "context_management.0.type"),
    ([{"type": "compaction", "compact_threshold": 0}], "context_management.0.compact_threshold"),
    ([{"type": "compaction", "compact_threshold": -5}], "context_management.0.compact_threshold"),
    ([{"type": "compaction", "compact_threshold": "100"}], "context_management.0.compact_threshold"),
    ([{"type": "compaction", "compact_threshold": 1.5}], "context_management.0.compact_threshold"),
    ([{"type": "compaction", "compact_threshold": True}], "context_management.0.compact_threshold"),
    ([{"type": "compaction"}, {"type": "compaction", "compact_threshold": 5}], "context_management.1"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_context_management_is_a_400_that_runs_and_stores_nothing(http, engine, cm, param, stream):
    conv = http.post("/v1/conversations", json={"items": HISTORY[:1]}).json()["id"]
    n = len(engine.requests)
    r = http.post("/v1/responses", json={"model": MODEL, "conversation": conv, "input": "hi [[nothink]]",
                                         "context_management": cm, "stream": stream})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"], err
    assert len(engine.requests) == n
    assert len(http.get(f"/v1/conversations/{conv}/items").json()["data"]) == 1
