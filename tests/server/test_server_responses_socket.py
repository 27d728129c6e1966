"""The Responses API over a WebSocket against a live server over the scripted engine: the `openai` SDK's
`client.responses.connect()` and a raw `websockets` client (the frames Codex CLI sends on its OpenAI provider)."""

from __future__ import annotations

import json
import time

import openai
import pytest
from server_live import MODEL, prompt_of
from server_scripts import GREETING, NO_THINK
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from hinfer.server import compaction

ANSWER = GREETING.split("\n\n", 1)[1]


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)


def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://") + "/v1/responses"


def until_done(conn) -> list:
    """A response's events, through its last (completed, incomplete, failed) or an error."""
    out = []
    for e in conn:
        out.append(e)
        if e.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return out
    raise AssertionError("the connection closed mid-response")


def raw_until_done(ws) -> list[dict]:
    out = []
    while True:
        e = json.loads(ws.recv(timeout=30))
        out.append(e)
        if e["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return out


def test_sdk_connection_streams_and_chains_with_store_false(client, engine):
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="[[greet]]", store=False)
        events = until_done(conn)
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        first = events[-1].response
        assert first.output_text == ANSWER
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == ANSWER
        # the next turn: only the new input, continuing the connection's last response (not stored)
        conn.response.create(model=MODEL, input="and now? [[nothink]]", previous_response_id=first.id, store=False,
                             reasoning={"effort": "none"})
        second = until_done(conn)[-1].response
        assert second.output_text == NO_THINK
        prompt = prompt_of(engine)
        assert "[[greet]]" in prompt and ANSWER in prompt and prompt.index("[[greet]]") < prompt.index("and now?")
    with pytest.raises(openai.NotFoundError):  # store false: nothing outside the connection
        client.responses.retrieve(first.id)


def test_raw_frames_warm_up_errors_and_the_connection_stays(base_url, engine):
    with connect(ws_url(base_url)) as ws:
        n = len(engine.requests)
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "generate": False, "store": False,
                            "input": [{"role": "user", "content": "the context so far"}]}))
        created, done = json.loads(ws.recv(timeout=30)), json.loads(ws.recv(timeout=30))
        assert (created["type"], done["type"]) == ("response.created", "response.completed")
        assert done["response"]["output"] == [] and len(engine.requests) == n  # nothing generated
        for bad, param in [("not json", None), (json.dumps({"type": "response.cancel"}), "type"),
                           (json.dumps({"type": "response.create", "model": MODEL, "input": "x",
                                        "background": True}), "background"),
                           (json.dumps({"type": "response.create", "model": MODEL, "input": "x",
                                        "temperature": "hot"}), "temperature"),
                           (json.dumps({"type": "response.create", "model": "other", "input": "x"}), None)]:
            ws.send(bad)
            err = json.loads(ws.recv(timeout=30))
            assert err["type"] == "error" and err["status"] in (400, 404) and err["error"]["message"], bad
            if param:
                assert err["error"]["param"] == param, err
        assert len(engine.requests) == n
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "previous_response_id": done["response"]["id"],
                            "input": [{"role": "user", "content": "hi [[nothink]]"}], "store": False,
                            "reasoning": {"effort": "none"}}))
        events = raw_until_done(ws)
        assert events[-1]["type"] == "response.completed" and events[-1]["response"]["output"][0]["type"] == "message"
        assert prompt_of(engine).startswith("<|im_start|>user\nthe context so far<|im_end|>")


def test_compaction_over_the_socket(base_url, engine):
    with connect(ws_url(base_url)) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False, "input": [
            {"role": "user", "content": "fix it [[nothink]]"}, {"type": "compaction_trigger"}]}))
        events = raw_until_done(ws)
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "compaction" and compaction.SUMMARY.decode(item["encrypted_content"]) == NO_THINK


def test_closing_mid_response_frees_the_lane(base_url, engine, monkeypatch):
    monkeypatch.setattr(engine, "step_s", 0.02)  # the answer takes seconds: the close always comes while it runs
    with connect(ws_url(base_url)) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "[[long]]", "store": False}))
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
    rid = engine.requests[-1].request_id
    for _ in range(200):
        if rid in engine.aborted or engine.stats().lanes_busy == 0:
            break
        time.sleep(0.05)
    assert rid in engine.aborted and engine.stats().lanes_busy == 0


def test_the_handshake_needs_the_key(slow_url):
    from slow_scripts import KEY

    with pytest.raises(InvalidStatus) as e:
        connect(ws_url(slow_url)).close()
    assert e.value.response.status_code == 403
    with connect(ws_url(slow_url), additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "wrong-model", "input": "x"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "error"


def test_closing_while_a_compaction_summary_runs_aborts_it(base_url, engine, monkeypatch):
    """A summary sends nothing until it is done: the socket is read meanwhile, so its close aborts the run. The
    engine steps slowly here (a summary then takes seconds), so the close always comes while it runs, however
    busy the machine."""
    monkeypatch.setattr(engine, "step_s", 0.02)
    before = len(engine.requests)
    with connect(ws_url(base_url)) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "[[long]]", "store": False,
                            "context_management": [{"type": "compaction", "compact_threshold": 1}]}))
        for _ in range(200):
            if len(engine.requests) > before:
                break
            time.sleep(0.01)
        assert len(engine.requests) > before, "the summary did not start"
    rid = engine.requests[before].request_id
    for _ in range(400):
        if rid in engine.aborted and engine.stats().lanes_busy == 0:
            break
        time.sleep(0.05)
    assert rid in engine.aborted and engine.stats().lanes_busy == 0
