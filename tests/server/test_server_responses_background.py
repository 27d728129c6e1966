"""Background responses (`background: true`) end to end: a live server over a scripted engine that makes a token
every 20 ms, so a long answer is still running while the test reads it, cancels it or deletes it; every path
ends with the engine's lanes free."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from server_live import MODEL, live_server
from slow_scripts import LONG, lanes_free
from slow_scripts import slow_engine as make_slow_engine


@pytest.fixture(scope="module")
def slow_engine(tokenizer):
    return make_slow_engine(tokenizer)


@pytest.fixture(scope="module")
def http(slow_engine, tokenizer):
    from hinfer.server import create_app

    with live_server(create_app(slow_engine, tokenizer, model_name=MODEL)) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            yield c


def _create(http, text: str, **extra) -> dict:
    r = http.post("/v1/responses", json={"model": MODEL, "input": text, "background": True, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _wait_status(http, rid: str, want: set[str], seconds: float = 20) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        resp = http.get(f"/v1/responses/{rid}").json()
        if resp["status"] in want:
            return resp
        time.sleep(0.05)
    raise AssertionError(f"{rid} did not reach {want}: {resp['status']}")



def test_background_answers_at_once_and_completes(http, slow_engine):
    resp = _create(http, "[[short]]")
    assert resp["status"] == "in_progress" and resp["background"] is True and resp["output"] == []
    done = _wait_status(http, resp["id"], {"completed"})
    assert done["background"] is True and done["output"][-1]["content"][0]["text"] == "Short answer."
    assert done["usage"]["output_tokens"] > 0
    lanes_free(slow_engine)


def test_cancel_stops_the_generation_and_frees_the_lane(http, slow_engine):
    resp = _create(http, "[[long]]")
    rid = resp["id"]
    assert http.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"
    r = http.post(f"/v1/responses/{rid}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled" and r.json()["id"] == rid
    assert http.get(f"/v1/responses/{rid}").json()["status"] == "cancelled"
    assert rid in slow_engine.aborted
    lanes_free(slow_engine)
    again = http.post(f"/v1/responses/{rid}/cancel")  # an ended response comes back as it is
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_a_finished_background_response_is_returned_by_cancel(http, slow_engine):
    rid = _create(http, "[[short]]")["id"]
    _wait_status(http, rid, {"completed"})
    r = http.post(f"/v1/responses/{rid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "completed"


def test_delete_stops_a_running_background_response(http, slow_engine):
    rid = _create(http, "[[long]]")["id"]
    r = http.delete(f"/v1/responses/{rid}")
    assert r.status_code == 200 and r.json()["deleted"] is True
    lanes_free(slow_engine)
    time.sleep(0.1)
    assert http.get(f"/v1/responses/{rid}").status_code == 404  # the stopped run did not store itself again


def test_a_background_failure_is_stored_as_failed(http, slow_engine):
    slow_engine.fail_next = (2, RuntimeError("boom"))
    rid = _create(http, "[[long]]")["id"]
    failed = _wait_status(http, rid, {"failed"})
    assert failed["error"]["code"] and "boom" in failed["error"]["message"]
    lanes_free(slow_engine)


def test_chaining_on_a_running_response_is_a_400(http, slow_engine):
    rid = _create(http, "[[long]]")["id"]
    r = http.post("/v1/responses", json={"model": MODEL, "input": "next", "previous_response_id": rid})
    assert r.status_code == 400 and r.json()["error"]["param"] == "previous_response_id"
    http.post(f"/v1/responses/{rid}/cancel")
    lanes_free(slow_engine)


def test_cancel_refusals(http):
    assert http.post("/v1/responses/resp_nope/cancel").status_code == 404
    plain = http.post("/v1/responses", json={"model": MODEL, "input": "[[short]]"}).json()
    r = http.post(f"/v1/responses/{plain['id']}/cancel")
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_id"


def test_the_openai_sdk_runs_and_cancels_in_background(http, slow_engine):
    import openai

    client = openai.OpenAI(base_url=str(http.base_url).rstrip("/") + "/v1", api_key="dummy", max_retries=0, timeout=30)
    r = client.responses.create(model=MODEL, input="[[long]]", background=True)
    assert r.status == "in_progress" and r.background
    assert client.responses.retrieve(r.id).status == "in_progress"
    c = client.responses.cancel(r.id)
    assert c.status == "cancelled" and c.id == r.id
    lanes_free(slow_engine)


def _events(lines) -> list[dict]:
    import json

    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


def test_a_streamed_background_response_goes_on_when_the_client_leaves(http, slow_engine):
    body = {"model": MODEL, "input": "[[long]]", "background": True, "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        seen = []
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen.append(line)
            if len(seen) >= 6:
                break  # the client leaves mid-answer
    first = _events(seen)
    assert [e["type"] for e in first[:2]] == ["response.created", "response.in_progress"]
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    rid = first[0]["response"]["id"]
    assert first[0]["response"]["background"] is True
    time.sleep(0.3)
    assert http.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"  # leaving did not stop it
    # picked up again after the last event seen, to the end
    with http.stream("GET", f"/v1/responses/{rid}", params={"stream": "true", "starting_after": 5}) as r:
        rest = _events(r.iter_lines())
    assert rest[0]["sequence_number"] == 6 and rest[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in rest] == list(range(6, 6 + len(rest)))
    text = "".join(e["delta"] for e in first + rest if e["type"] == "response.output_text.delta")
    assert text == LONG.split("\n\n", 1)[1] and rest[-1]["response"]["output"][-1]["content"][0]["text"] == text
    assert http.get(f"/v1/responses/{rid}").json()["status"] == "completed"
    with http.stream("GET", f"/v1/responses/{rid}", params={"stream": "true"}) as r:  # an ended one, from the start
        again = _events(r.iter_lines())
    assert again == first + rest
    lanes_free(slow_engine)


def test_cancel_ends_a_streamed_background_response(http, slow_engine):
    body = {"model": MODEL, "input": "[[long]]", "background": True, "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as r:
        lines = r.iter_lines()
        created = _events([next(line for line in lines if line.startswith("data: "))])[0]
        rid = created["response"]["id"]
        assert http.post(f"/v1/responses/{rid}/cancel").json()["status"] == "cancelled"
        tail = _events(lines)  # the stream ends once the generation is stopped
    assert all(e["type"] != "response.completed" for e in tail)
    lanes_free(slow_engine)


def test_only_streamed_background_responses_stream_again(http, slow_engine):
    rid = _create(http, "[[short]]")["id"]
    _wait_status(http, rid, {"completed"})
    r = http.get(f"/v1/responses/{rid}", params={"stream": "true"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    assert http.get("/v1/responses/resp_nope", params={"stream": "true"}).status_code == 404


PLAUSIBLE = {"background": [True, False], "store": [True, False], "stream": [True, False],
             "max_output_tokens": [1, 8, 32], "input": ["[[long]]", "hi"], "metadata": [{"k": "v"}]}
ODD = [None, True, False, 0, 1, -1, 2**40, 0.5, "x", "", [], {}, {"a": 1}, [None]]
FOLLOW = [("GET", "", {}), ("GET", "", {"stream": "true"}), ("GET", "", {"stream": "true", "starting_after": "3"}),
          ("GET", "", {"stream": "true", "starting_after": "-7"}), ("GET", "", {"stream": "1", "starting_after": "x"}),
          ("GET", "", {"stream": "true", "starting_after": str(2**70)}), ("POST", "/cancel", {}),
          ("DELETE", "", {}), ("POST", "/cancel", {"x": "y"}), ("GET", "/input_items", {"limit": "0"})]  # fmt: skip


def test_background_fuzz(http, slow_engine):
    """Background bodies with other values (seeded draws: `background`, `store`, `stream`, the budget, the input),
    each followed by a read, a resumed stream, a cancel, a delete or a page of its input: never a 5xx, 400s in the
    error shape, and every lane free once the runs are stopped."""
    import random

    rng = random.Random(0)
    print("seed 0")
    started = []
    for _ in range(60):
        body = {"model": MODEL, "input": rng.choice(["[[short]]", "[[long]]", "hi"]), "background": True,
                "store": True, "max_output_tokens": rng.choice([4, 16, 64])}  # fmt: skip
        for key in rng.sample(sorted(PLAUSIBLE), rng.choice([0, 1, 1, 2, 3])):
            body[key] = rng.choice(ODD if rng.random() < 0.3 else PLAUSIBLE[key])
        with http.stream("POST", "/v1/responses", json=body) as r:
            head = r.read()[:4096] if rng.random() < 0.7 else next(r.iter_bytes(), b"")
            status = r.status_code
        assert status < 500, head
        if status >= 400:
            assert r.headers["content-type"].startswith("application/json") and b'"message"' in head, head
            continue
        found = re.search(rb'"id":\s*"(resp_[A-Za-z0-9]+)"', head)
        if found is None or body.get("background") is not True:
            continue
        rid = found.group(1).decode()
        started.append(rid)
        method, tail, params = rng.choice(FOLLOW)
        with http.stream(method, f"/v1/responses/{rid}{tail}", params=params) as f:
            f.read()
            assert f.status_code < 500, f.text
    for rid in started:  # what still runs stops; an ended or deleted one answers as it is, or 404
        assert http.post(f"/v1/responses/{rid}/cancel").status_code in (200, 404)
    print(f"{len(started)} background responses started")
    assert len(started) >= 20
    lanes_free(slow_engine)
