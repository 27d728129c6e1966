"""Unexpected failures: a 500 is JSON in the dialect's shape, keeps the keep-alive connection usable, and is
logged once with its request id; every 4xx/5xx answer is one log line with its request id."""

from __future__ import annotations

import http.client
import json
import logging
from urllib.parse import urlparse

import httpx
import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server

from hinfer.server import create_app


@pytest.fixture(scope="module")
def boom_url(tokenizer):
    eng = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    app = create_app(eng, tokenizer, model_name=MODEL)

    async def boom():
        raise RuntimeError("a bug in a route")

    app.add_api_route("/v1/boom", boom, methods=["POST"])
    app.add_api_route("/v1/messages/boom", boom, methods=["POST"])
    with live_server(app) as url:
        yield url


def _post(conn: http.client.HTTPConnection, path: str, rid: str, body: dict | None = None) -> tuple[int, dict, dict]:
    conn.request("POST", path, body=json.dumps(body or {}), headers={"content-type": "application/json",
                                                                     "x-request-id": rid})
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())


def _records(caplog, rid: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if rid in r.getMessage()]


def test_a_500_is_json_keeps_the_connection_and_is_logged_once(boom_url, caplog):
    caplog.set_level(logging.INFO)
    u = urlparse(boom_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        status, headers, body = _post(conn, "/v1/boom", "rid-boom-1")
        assert status == 500 and headers["x-request-id"] == "rid-boom-1"
        assert body["error"]["type"] == "server_error" and body["error"]["code"] == "internal_error"
        assert "rid-boom-1" in body["error"]["message"]
        sock = conn.sock
        status, _, body = _post(conn, "/v1/messages/boom", "rid-boom-2")
        assert status == 500 and body["type"] == "error" and body["error"]["type"] == "api_error"
        assert conn.sock is sock  # the same keep-alive connection served both
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["data"] and conn.sock is sock
    finally:
        conn.close()
    for rid in ("rid-boom-1", "rid-boom-2"):
        recs = _records(caplog, rid)
        assert len(recs) == 1, [r.getMessage() for r in recs]
        assert recs[0].levelno == logging.ERROR and recs[0].exc_info is not None
    assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]


def test_every_error_answer_is_one_log_line_with_its_request_id(boom_url, caplog):
    caplog.set_level(logging.INFO)
    u = urlparse(boom_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        status, _, _ = _post(conn, "/v1/chat/completions", "rid-bad-1", {"model": MODEL, "messages": []})
        assert status == 400
        status, _, _ = _post(conn, "/v1/chat/completions", "rid-bad-2", {"model": "nope", "messages": [
            {"role": "user", "content": "x"}]})
        assert status == 400
        status, _, _ = _post(conn, "/v1/nowhere", "rid-bad-3")
        assert status == 404
    finally:
        conn.close()
    for rid, status in (("rid-bad-1", 400), ("rid-bad-2", 400), ("rid-bad-3", 404)):
        recs = _records(caplog, rid)
        assert len(recs) == 1 and f"-> {status}" in recs[0].getMessage() and "\n" not in recs[0].getMessage()
    assert "not served here" in _records(caplog, "rid-bad-2")[0].getMessage()


def test_bodies_over_the_limit_are_413(tokenizer):
    eng = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL, max_body_bytes=2000)) as url:
        big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}
        r = httpx.post(url + "/v1/chat/completions", json=big, timeout=30)
        assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: counted as it arrives
            data = json.dumps({**big, "model": MODEL}).encode()
            for i in range(0, len(data), 1000):
                yield data[i:i + 1000]

        r = httpx.post(url + "/v1/messages", content=chunks(), headers={"content-type": "application/json"},
                       timeout=30)
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large", r.text
        small = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(url + "/v1/messages", json=small, timeout=30).status_code == 200


def test_log_requests_logs_every_answer_once(tokenizer, caplog):
    caplog.set_level(logging.INFO)
    eng = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL, log_requests=True)) as url:
        small = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(url + "/v1/messages", json=small, headers={"x-request-id": "rid-log-1"}, timeout=30)
        assert r.status_code == 200
        r = httpx.get(url + "/v1/models", headers={"x-request-id": "rid-log-2"}, timeout=30)
        assert r.status_code == 200
        r = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": []},
                       headers={"x-request-id": "rid-log-3"}, timeout=30)
        assert r.status_code == 400
    for rid, line in (("rid-log-1", "POST /v1/messages -> 200"), ("rid-log-2", "GET /v1/models -> 200"),
                      ("rid-log-3", "POST /v1/chat/completions -> 400")):
        recs = [r for r in _records(caplog, rid) if " -> " in r.getMessage()]  # not the generation summary
        assert len(recs) == 1 and line in recs[0].getMessage(), [r.getMessage() for r in recs]


def test_successes_are_not_logged_by_default(boom_url, caplog):
    caplog.set_level(logging.INFO)
    assert httpx.get(boom_url + "/v1/models", headers={"x-request-id": "rid-quiet-1"}, timeout=30).status_code == 200
    assert not _records(caplog, "rid-quiet-1")
