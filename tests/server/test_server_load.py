"""Client disconnects free their lane; many concurrent clients get complete streams or 429s, never a hang."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server

from hinfer.server import create_app

LONG = "Ok.\n</think>\n\n" + " ".join(f"w{i}" for i in range(300))


def wait_until(cond, timeout=5.0) -> float:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "condition not met in time"
        time.sleep(0.005)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def slow(tokenizer):
    """Two lanes, 10 ms per step, long answers."""
    eng = ScriptedEngine(tokenizer, {}, default=LONG, lanes=2, max_pending=4, step_s=0.01, model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL)) as url:
        yield url, eng


CHAT_STREAM = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "go"}]}
MSG_STREAM = {"model": MODEL, "stream": True, "max_tokens": 1000, "messages": [{"role": "user", "content": "go"}]}


@pytest.mark.parametrize("path,body", [("/v1/chat/completions", CHAT_STREAM), ("/v1/messages", MSG_STREAM)])
def test_disconnect_mid_stream_frees_the_lane(slow, path, body):
    url, eng = slow
    wait_until(lambda: eng.busy == 0)
    n_aborted = len(eng.aborted)
    tokens_before = eng.tokens
    with httpx.Client(base_url=url, timeout=10) as c, c.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
        assert eng.busy == 1
    # The connection is closed: the engine is told at once and the lane is free within a few steps.
    took = wait_until(lambda: eng.busy == 0 and len(eng.aborted) == n_aborted + 1)
    assert took < 1.0
    produced = eng.tokens - tokens_before
    time.sleep(0.1)
    assert eng.tokens - tokens_before <= produced + 1  # nothing more is generated for it
    assert produced < 100  # the 600-token answer was cut short


def test_disconnect_during_nonstreaming_request_aborts(slow):
    url, eng = slow
    wait_until(lambda: eng.busy == 0)
    n_aborted = len(eng.aborted)
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=url, timeout=0.3) as c:
        c.post("/v1/chat/completions", json={**CHAT_STREAM, "stream": False})
    wait_until(lambda: eng.busy == 0 and len(eng.aborted) == n_aborted + 1)


def test_disconnect_while_queued_leaves_the_queue(slow):
    url, eng = slow
    wait_until(lambda: eng.busy == 0)
    with httpx.Client(base_url=url, timeout=10) as c:
        holders = [c.stream("POST", "/v1/chat/completions", json=CHAT_STREAM) for _ in range(2)]
        for h in holders:
            assert h.__enter__().status_code == 200
        assert eng.busy == 2
        with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=url, timeout=0.3) as impatient:
            impatient.post("/v1/chat/completions", json=CHAT_STREAM)  # waits in the queue for its first token
        wait_until(lambda: eng.stats().queue_depth == 0)
        for h in holders:
            h.__exit__(None, None, None)
    wait_until(lambda: eng.busy == 0)


def _stream_ok_openai(text: str) -> bool:
    events = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
    if events[-1] != "[DONE]":
        return False
    chunks = [json.loads(e) for e in events[:-1]]
    return any(ch["choices"] and ch["choices"][0]["finish_reason"] == "stop" for ch in chunks)


def _stream_ok_anthropic(text: str) -> bool:
    names = [ln[7:] for ln in text.splitlines() if ln.startswith("event: ")]
    return names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]


def test_32_concurrent_streams_get_answers_or_429(tokenizer):
    script = "Ok.\n</think>\n\n" + " ".join(f"w{i}" for i in range(20))
    eng = ScriptedEngine(tokenizer, {}, default=script, lanes=4, max_pending=8, step_s=0.02, model_name=MODEL)
    peak = {"busy": 0, "queue": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            s = eng.stats()
            peak["busy"] = max(peak["busy"], s.lanes_busy)
            peak["queue"] = max(peak["queue"], s.queue_depth)
            time.sleep(0.002)

    async def one(client: httpx.AsyncClient, i: int) -> str:
        anthropic = i % 2 == 1
        path, body = ("/v1/messages", MSG_STREAM) if anthropic else ("/v1/chat/completions", CHAT_STREAM)
        r = await client.post(path, json=body)
        if r.status_code == 429:
            err = r.json()
            assert (err["error"]["type"] == "rate_limit_error") if anthropic else (err["error"]["code"] == "queue_full")
            return "429"
        assert r.status_code == 200, r.text
        assert (_stream_ok_anthropic if anthropic else _stream_ok_openai)(r.text), r.text[-300:]
        return "ok"

    async def main() -> list[str]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
            return await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(32))), timeout=60)

    with live_server(create_app(eng, tokenizer, model_name=MODEL)) as url:
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            results = asyncio.run(main())
        finally:
            stop.set()
            sampler.join()
        assert set(results) <= {"ok", "429"}
        assert results.count("ok") >= 12  # 4 lanes + 8 queue slots were all used
        assert results.count("429") >= 1
        assert peak["busy"] == 4 and peak["queue"] == 8
        wait_until(lambda: eng.busy == 0 and eng.stats().queue_depth == 0)
        with httpx.Client(base_url=url) as c:  # and it still serves
            assert c.post("/v1/chat/completions", json={**CHAT_STREAM, "stream": False}).status_code == 200
