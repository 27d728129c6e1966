"""`hinfer batch`'s runner: OpenAI Batch API lines answered through the server's routes in process (the scripted
engine), in the input's order, each dialect, a request's 4xx kept as its response, lines that are no request
answered with an error, streams turned off."""

from __future__ import annotations

import asyncio
import json

from server_live import MODEL
from server_scripts import GREETING, WEATHER_TOOL

from hinfer.server import create_app
from hinfer.server.batch_file import run_batch

ANSWER = GREETING.split("\n\n", 1)[1]


def test_batch_lines_answered_in_order(engine, tokenizer):
    app = create_app(engine, tokenizer, model_name=MODEL, webui=False)
    lines = [
        {"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": MODEL, "messages": [{"role": "user", "content": "[[greet]]"}], "stream": True}},
        {"custom_id": "tools", "url": "/v1/chat/completions",
         "body": {"model": MODEL, "messages": [{"role": "user", "content": "[[weather]]"}], "tools": [WEATHER_TOOL]}},
        {"custom_id": "responses", "url": "/v1/responses", "body": {"model": MODEL, "input": "[[greet]]"}},
        {"custom_id": "messages", "url": "/v1/messages",
         "body": {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "[[nothink]]"}]}},
        {"custom_id": "bad model", "url": "/v1/chat/completions",
         "body": {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}},
        {"custom_id": "bad url", "url": "/v1/embeddings", "body": {}},
    ]  # fmt: skip
    text = [json.dumps(x) for x in lines] + ["", "not json"]
    out: list[str] = []
    done: list[int] = []
    summary = asyncio.run(run_batch(app, text, out.append, concurrency=3, progress=done.append))
    got = [json.loads(line) for line in out]
    assert [g["custom_id"] for g in got] == [x["custom_id"] for x in lines] + [None]
    assert all(line.endswith("\n") for line in out) and done == list(range(1, 8))
    chat, tools, resp, msgs, bad_model, bad_url, not_json = got
    assert chat["response"]["status_code"] == 200 and chat["error"] is None and chat["id"].startswith("batch_req_")
    assert chat["response"]["body"]["choices"][0]["message"]["content"] == ANSWER  # one body, not a stream
    assert chat["response"]["request_id"].startswith("req-")
    assert tools["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert resp["response"]["body"]["status"] == "completed"
    assert resp["response"]["body"]["output"][-1]["content"][0]["text"] == ANSWER
    assert msgs["response"]["body"]["content"][0]["text"] == "Hello! How can I help you today?"
    assert bad_model["response"]["status_code"] == 400 and "error" in bad_model["response"]["body"]
    assert bad_url["response"] is None and bad_url["error"]["code"] == "invalid_url"
    assert not_json["error"]["code"] == "invalid_json" and "line 8" in not_json["error"]["message"]
    assert (summary.lines, summary.ok, summary.failed) == (7, 4, 3)
