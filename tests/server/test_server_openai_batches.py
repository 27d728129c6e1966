"""OpenAI Files and Batches through the `openai` SDK: uploads, batches run line by line, their output and error
files, cancels, bad inputs; on conftest's slow_keyed server, whose lanes every path leaves free."""

from __future__ import annotations

import json
import re
import time

import httpx
import openai
import pytest
from server_live import MODEL
from slow_scripts import KEY, lanes_free


@pytest.fixture(scope="module")
def client(slow_url):
    return openai.OpenAI(base_url=slow_url + "/v1", api_key=KEY, max_retries=0, timeout=30)


def _line(cid: str, text: str, url: str = "/v1/chat/completions", **body) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": {
        "model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": text}], **body}})  # fmt: skip


def _upload(client, lines: list[str]):
    return client.files.create(file=("input.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch")


def _ended(client, batch_id: str, seconds: float = 20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        b = client.batches.retrieve(batch_id)
        if b.status in ("completed", "cancelled", "failed"):
            return b
        time.sleep(0.05)
    raise AssertionError(f"{batch_id} did not end: {b.status}")



def test_batch_runs_and_its_files_read_back(client, slow_engine):
    f = _upload(client, [_line("a", "[[short]]"), _line("bad", "[[short]]", max_tokens=-3), _line("c", "[[short]]")])
    assert f.id.startswith("file-") and f.purpose == "batch" and f.filename == "input.jsonl" and f.bytes > 0
    assert client.files.retrieve(f.id).id == f.id and f.id in [x.id for x in client.files.list()]
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"job": "test"})  # fmt: skip
    assert batch.status == "in_progress" and batch.request_counts.total == 3 and batch.metadata == {"job": "test"}
    done = _ended(client, batch.id)
    assert done.status == "completed" and done.completed_at is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    out = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert [o["custom_id"] for o in out] == ["a", "c"] and all(o["response"]["status_code"] == 200 for o in out)
    assert out[0]["response"]["body"]["choices"][0]["message"]["content"].endswith("Short answer.")
    err = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert [e["custom_id"] for e in err] == ["bad"] and err[0]["response"]["status_code"] == 400
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"
    assert batch.id in [b.id for b in client.batches.list()]
    for fid in (f.id, done.output_file_id, done.error_file_id):
        assert client.files.delete(fid).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(f.id)
    lanes_free(slow_engine)


def _gauges(url: str) -> dict[str, tuple[float, float]]:
    """/metrics' (batches running, their requests waiting) by API."""
    text = httpx.get(f"{url}/metrics", headers={"x-api-key": KEY}).text
    found = {(n, a): float(v) for n, a, v in re.findall(r'^(hinfer_batch\w+)\{.*api="(\w+)"\} (\S+)$', text, re.M)}
    return {a: (found[("hinfer_batches_running", a)], found[("hinfer_batch_requests_waiting", a)])
            for a in ("openai", "anthropic")}


def test_cancel_stops_a_running_batch(client, slow_engine, slow_url):
    f = _upload(client, [_line(f"r{i}", "[[long]]", max_tokens=2000) for i in range(6)])
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    time.sleep(0.3)  # two requests (the engine's lanes) are running
    assert _gauges(slow_url) == {"openai": (1.0, 6.0), "anthropic": (0.0, 0.0)}
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = _ended(client, batch.id)
    assert _gauges(slow_url)["openai"] == (0.0, 0.0)
    assert done.status == "cancelled" and done.cancelled_at is not None and done.output_file_id is None
    assert client.batches.cancel(batch.id).status == "cancelled"  # an ended one as it is
    client.files.delete(f.id)
    lanes_free(slow_engine)


def test_completions_and_responses_batches(client, slow_engine):
    lines = [json.dumps({"custom_id": "p", "url": "/v1/completions", "body": {"model": MODEL, "prompt": "hi",
                                                                               "max_tokens": 4}})]  # fmt: skip
    done = _ended(client, client.batches.create(input_file_id=_upload(client, lines).id, endpoint="/v1/completions",
                                                completion_window="24h").id)  # fmt: skip
    assert done.request_counts.completed == 1
    lines = [json.dumps({"custom_id": "r", "url": "/v1/responses", "body": {"model": MODEL, "input": "[[short]]",
                                                                           "background": True, "store": True}})]
    done = _ended(client, client.batches.create(input_file_id=_upload(client, lines).id, endpoint="/v1/responses",
                                                completion_window="24h").id)  # fmt: skip
    out = json.loads(client.files.content(done.output_file_id).text)
    assert out["response"]["body"]["object"] == "response" and out["response"]["body"]["status"] == "completed"
    lanes_free(slow_engine)


@pytest.mark.parametrize("lines, endpoint", [
    (["not json"], "/v1/chat/completions"),
    ([_line("a", "x", url="/v1/completions")], "/v1/chat/completions"),  # another endpoint's line
    ([_line("a", "x"), _line("a", "y")], "/v1/chat/completions"),  # a custom id twice
    ([""], "/v1/chat/completions"),  # no request
    ([_line("a", "x")], "/v1/messages"),  # not an OpenAI batch endpoint
])  # fmt: skip
def test_bad_inputs_are_400s(client, lines, endpoint):
    f = _upload(client, lines)
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h")
    client.files.delete(f.id)


def test_bad_uploads_and_unknown_ids(slow_url, client):
    h = {"authorization": f"Bearer {KEY}"}
    assert httpx.post(f"{slow_url}/v1/files", json={"purpose": "batch"}, headers=h).status_code == 400  # not multipart
    r = httpx.post(f"{slow_url}/v1/files", files={"file": ("x.jsonl", b"{}")}, data={"purpose": "fine-tune"}, headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose"
    r = httpx.post(f"{slow_url}/v1/files", data={"purpose": "batch"}, files={"other": ("x", b"1")}, headers=h)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    for method, path in (("GET", "/v1/files/file-nope"), ("GET", "/v1/files/file-nope/content"),
                         ("DELETE", "/v1/files/file-nope"), ("GET", "/v1/batches/batch_nope"),
                         ("POST", "/v1/batches/batch_nope/cancel")):  # fmt: skip
        assert httpx.request(method, slow_url + path, headers=h).status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    assert httpx.get(f"{slow_url}/v1/files").status_code == 401  # the key, as everywhere
