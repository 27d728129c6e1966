"""Anthropic Message Batches end to end: the `anthropic` SDK against a live server with a key (conftest's
slow_keyed: a token every 20 ms, so a long answer still runs while a test cancels its batch); every path ends with
the engine's lanes free."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import pytest
from server_live import MODEL, live_server
from slow_scripts import KEY, lanes_free
from slow_scripts import slow_engine as make_slow_engine


@pytest.fixture(scope="module")
def client(slow_url):
    return anthropic.Anthropic(base_url=slow_url, api_key=KEY, max_retries=0, timeout=30)


def _request(cid: str, text: str, **params) -> dict:
    return {"custom_id": cid, "params": {"model": MODEL, "max_tokens": 64,
                                         "messages": [{"role": "user", "content": text}], **params}}  # fmt: skip


def _ended(client, batch_id: str, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.05)
    raise AssertionError(f"{batch_id} did not end: {batch.processing_status}")



def test_batch_runs_and_its_results_read_back(client, slow_engine):
    reqs = [_request("a", "[[short]]"), _request("bad", "[[short]]", max_tokens=-3),
            _request("c", "[[short]]", system="be brief", thinking={"type": "enabled", "budget_tokens": 1024})]
    batch = client.messages.batches.create(requests=reqs)
    assert batch.id.startswith("msgbatch_") and batch.type == "message_batch" and batch.results_url is None
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    done = _ended(client, batch.id)
    c = done.request_counts
    assert (c.succeeded, c.errored, c.canceled, c.processing) == (2, 1, 0, 0)
    assert done.ended_at is not None and done.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    results = list(client.messages.batches.results(batch.id))
    assert [r.custom_id for r in results] == ["a", "bad", "c"]  # in the batch's order
    assert results[0].result.type == "succeeded" and results[0].result.message.content[-1].text.endswith("Short answer.")
    assert results[1].result.type == "errored" and results[1].result.error.error.type == "invalid_request_error"
    assert [b.type for b in results[2].result.message.content] == ["thinking", "text"]  # the creator's params
    assert batch.id in [b.id for b in client.messages.batches.list()]
    deleted = client.messages.batches.delete(batch.id)
    assert deleted.id == batch.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)
    lanes_free(slow_engine)


def test_cancel_stops_a_running_batch(client, slow_engine, slow_url):
    batch = client.messages.batches.create(requests=[_request(f"r{i}", "[[long]]", max_tokens=2000) for i in range(6)])
    r = httpx.get(f"{slow_url}/v1/messages/batches/{batch.id}/results", headers={"x-api-key": KEY})
    assert r.status_code == 400  # its results come once it has ended
    time.sleep(0.3)  # two requests (the engine's lanes) are running
    with pytest.raises(anthropic.BadRequestError):  # and a running batch is not deleted
        client.messages.batches.delete(batch.id)
    assert client.messages.batches.cancel(batch.id).processing_status in ("canceling", "ended")
    done = _ended(client, batch.id)
    assert done.request_counts.canceled == 6 and done.cancel_initiated_at is not None
    assert {r.result.type for r in client.messages.batches.results(batch.id)} == {"canceled"}
    assert client.messages.batches.cancel(batch.id).processing_status == "ended"  # an ended one as it is
    lanes_free(slow_engine)


@pytest.mark.parametrize("body", [
    {"requests": []},
    {"requests": "x"},
    {},
    {"requests": [{"custom_id": "a", "params": {}}, {"custom_id": "a", "params": {}}]},
    {"requests": [{"custom_id": "bad id!", "params": {}}]},
    {"requests": [{"custom_id": "a\n", "params": {}}]},
    {"requests": [{"custom_id": "a" * 65, "params": {}}]},
    {"requests": [{"custom_id": "a", "params": "x"}]},
    {"requests": [{"params": {}}]},
])  # fmt: skip
def test_bad_batches_are_400s_in_the_anthropic_shape(slow_url, body):
    r = httpx.post(f"{slow_url}/v1/messages/batches", json=body, headers={"x-api-key": KEY})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["message"]


def test_unknown_batches_and_the_key(slow_url, client):
    for method, path in (("GET", ""), ("POST", "/cancel"), ("DELETE", ""), ("GET", "/results")):
        r = httpx.request(method, f"{slow_url}/v1/messages/batches/msgbatch_nope{path}", headers={"x-api-key": KEY})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(f"{slow_url}/v1/messages/batches", json={"requests": [_request("a", "hi")]})
    assert r.status_code == 401  # no key: no batch


def test_list_pages_newest_first(client, slow_engine, slow_url):
    ids = [client.messages.batches.create(requests=[_request("a", "[[short]]")]).id for _ in range(3)]
    for bid in ids:
        _ended(client, bid)
    first = client.messages.batches.list(limit=2)
    assert [b.id for b in first.data][:2] == ids[::-1][:2] and first.has_more
    rest = client.messages.batches.list(limit=2, after_id=first.data[-1].id)
    assert rest.data[0].id == ids[0]
    before = client.messages.batches.list(limit=1, before_id=ids[0])
    assert [b.id for b in before.data] == [ids[1]]
    r = httpx.get(f"{slow_url}/v1/messages/batches", params={"after_id": "msgbatch_nope"},
                  headers={"x-api-key": KEY})  # fmt: skip
    assert r.status_code == 400
    for bid in ids:
        client.messages.batches.delete(bid)
    lanes_free(slow_engine)


def test_a_request_refused_for_load_tries_again(monkeypatch):
    """The engine's 429 (queue full) is not a result: the request waits and goes again."""
    from hinfer.server.anthropic_batches import _answer

    answers = iter([429, 429, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        body = {"type": "message", "content": []} if status == 200 else {"type": "error", "error": {
            "type": "rate_limit_error", "message": "busy"}}  # fmt: skip
        return httpx.Response(status, json=body)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://x") as c:
            return await _answer(c, {"model": MODEL})

    monkeypatch.setattr("hinfer.server.kept_jobs.RETRY_S", 0.01)
    assert asyncio.run(go()) == {"type": "succeeded", "message": {"type": "message", "content": []}}


def test_shutdown_ends_a_running_batch(tokenizer):
    """A server stopped while a batch runs: its running requests stop, what they had not answered is canceled,
    the batch is `ended`, the lanes are free and the shutdown does not wait for the batch's long answers."""
    from hinfer.server import create_app

    engine = make_slow_engine(tokenizer)
    app = create_app(engine, tokenizer, model_name=MODEL)
    with live_server(app) as u:
        c = anthropic.Anthropic(base_url=u, api_key="x", max_retries=0, timeout=30)
        bid = c.messages.batches.create(requests=[_request(f"r{i}", "[[long]]", max_tokens=2000)
                                                  for i in range(4)]).id  # fmt: skip
        time.sleep(0.3)
        assert c.messages.batches.retrieve(bid).request_counts.processing == 4
        t0 = time.monotonic()
    batch = app.state.hinfer.message_batches.get(bid)
    assert batch.status == "ended" and time.monotonic() - t0 < 6  # 8 s answers were not waited for
    assert {r["type"] for r in batch.results.values()} <= {"canceled", "errored"} and len(batch.results) == 4
    lanes_free(engine)
