"""Fuzz a running hinfer server with mutated requests, then check that nothing leaked.

    python scripts/fuzz_server.py http://127.0.0.1:8000 [--requests 1000] [--seed 0] [--concurrency 32]

Each request is a valid body of one route (chat completions with tools, images, JSON schemas, logprobs, n; text
completions; Responses with every input item kind, tools of every type, streaming; Anthropic messages with
thinking, tools, images, documents, late system turns; count_tokens; Message Batches; OpenAI Batches of an uploaded
file; tokenize; Conversations;
background Responses,
each followed by a read, a resumed stream, a cancel, a delete or nothing), mutated one to
three times (a field dropped, set to any JSON value among NaN, Infinity, lone surrogates, huge numbers, nested
junk, or a common field added), or sent whole, or cut short, or not JSON at all; a third of the streams are left
by the client after a few chunks. Then a few WebSockets send mutated Responses bodies as response.create messages
(each answer must end in a terminal or error event, no 5xx, no failed response; a fifth are left mid-answer).
Token budgets are capped (8) so the run ends on a CPU too. Afterwards the
server's /metrics must show no request in flight, no lane busy, an empty queue and every page and GDN slot free
(cached prefix pages count as free). Exit status 1 on any 5xx, transport error or leak; each is printed with the
body that caused it. The CPU suite fuzzes the same routes against a scripted engine
(tests/server/test_server_fuzz.py); this one runs the real engine (the demo model, `--spec mtp`,
`--tensor-parallel 2`, a GPU server).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import re
import sys
import time

import httpx

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="  # 1x1
IMG = "data:image/png;base64," + PNG
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ATOOL = {"name": "Bash", "description": "run", "input_schema": {"type": "object",
                                                                 "properties": {"command": {"type": "string"}}}}
RTOOL = {"type": "function", "name": "shell", "description": "run",
         "parameters": {"type": "object", "properties": {"cmd": {"type": "array", "items": {"type": "string"}}}}}
CTOOL = {"type": "custom", "name": "apply_patch", "description": "patch",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
BODIES = [
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                              "max_tokens": 8}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "weather?"}], "tools": [TOOL],
                              "tool_choice": "auto", "max_tokens": 8, "stream": True,
                              "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": IMG}}]}], "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "json"}], "max_tokens": 16,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                                  "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": True,
                              "top_logprobs": 3, "max_tokens": 4, "seed": 3, "temperature": 0.7}),
    ("/v1/chat/completions", {"max_completion_tokens": 8, "messages": [
        {"role": "developer", "content": "d"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"x\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]}],
        "tools": [TOOL], "stop": ["a", "b"], "logit_bias": {"5": 1.0}, "presence_penalty": 0.5, "top_k": 3,
        "min_p": 0.1, "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False}}),
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "echo": True, "logprobs": 2}),
    ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 8, "stream": True}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 8}),
    ("/v1/responses", {"instructions": "brief", "max_output_tokens": 8, "stream": True, "store": False,
                       "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "low"},
                       "tools": [RTOOL, CTOOL, {"type": "namespace", "name": "mcp__echo", "description": "e",
                                                "tools": [{"type": "function", "name": "echo"}]},
                                 {"type": "tool_search", "execution": "client", "description": "s"},
                                 {"type": "web_search"}],
                       "input": [
        {"type": "message", "role": "developer", "content": "dev"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                                                        {"type": "input_image", "image_url": IMG}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"cmd\": [\"ls\"]}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
        {"type": "message", "role": "user", "content": "go"}]}),
    ("/v1/responses", {"max_output_tokens": 8, "stream": True, "store": False, "tools": [RTOOL], "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "compaction", "encrypted_content": "gAAAA-elsewhere"}, {"type": "compaction_trigger"}]}),
    ("/v1/responses", {"max_output_tokens": 8, "stream": True, "store": True, "tools": [RTOOL],
                       "context_management": [{"type": "compaction", "compact_threshold": 4}], "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "compaction", "encrypted_content": "gAAAA-elsewhere"},
        {"type": "message", "role": "user", "content": "go on"}]}),
    ("/v1/responses", {"max_output_tokens": 8, "context_management": [{"type": "compaction"}], "input": "hi"}),
    ("/v1/responses/compact", {"max_output_tokens": 8, "instructions": "brief", "input": [
        {"type": "message", "role": "user", "content": "hi"}, {"type": "message", "role": "assistant", "content": "ok"}]}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 8, "background": True, "store": True}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 8, "background": True, "store": True, "stream": True}),
    ("/v1/messages", {"max_tokens": 8, "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
                      "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages", {"max_tokens": 8, "stream": True, "tools": [ATOOL], "thinking": {"type": "enabled",
                                                                                     "budget_tokens": 1024},
                      "messages": [
        {"role": "user", "content": [{"type": "text", "text": "run ls"}, {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": PNG}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a b"}]},
        {"role": "system", "content": "late"}, {"role": "user", "content": "again"}]}),
    ("/v1/messages", {"max_tokens": 8, "tools": [ATOOL], "context_management": {"edits": [
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10},
         "keep": {"type": "tool_uses", "value": 0}, "clear_tool_inputs": True},
        {"type": "compact_20260112"}]}, "messages": [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": [{"type": "compaction", "content": "earlier: ran pwd"},
                                          {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a b"}]}]}),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages/batches", {"requests": [
        {"custom_id": "a", "params": {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}},
        {"custom_id": "b", "params": {"max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "x"}]}}]}),
    ("/v1/batches", {"input_file_id": "", "endpoint": "/v1/chat/completions", "completion_window": "24h",
                     "metadata": {"k": "v"}}),
    ("/tokenize", {"prompt": "hi there"}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
    ("/v1/conversations", {"items": [{"type": "message", "role": "user", "content": "hi"}], "metadata": {"a": "b"}}),
]  # fmt: skip
ODD = [None, -1, 0, 1, 2**31, 2**63, 10**40, 1e308, float("nan"), float("inf"), "", "x" * 5000, "\ud800", "\x00",
       [], {}, [None], {"a": None}, True, [[[[]]]], 0.5, "NaN", [1, "a"], {"type": "x"}, [{"role": "user"}]]
ADDED = ["extra", "stream", "n", "max_tokens", "stop", "logit_bias", "top_k", "min_p", "tool_choice",
         "parallel_tool_calls", "previous_response_id", "prompt_cache_key", "metadata"]
BUDGETS = ("max_tokens", "max_output_tokens", "max_completion_tokens")
# what follows a background response's POST: (method, path after /v1/responses/{id}); None: nothing (it runs on)
FOLLOW = [None, ("GET", ""), ("GET", "?stream=true"), ("GET", "?stream=true&starting_after=2"),
          ("GET", "?stream=true&starting_after=-5"), ("GET", "?stream=true&starting_after=99999"),
          ("GET", "?stream=yes&starting_after=x"), ("POST", "/cancel"), ("DELETE", ""), ("POST", "/cancel/x")]
RESPONSE_ID = re.compile(rb'"id":\s*"(resp_[A-Za-z0-9_-]+)"')
IDLE = {"hinfer_requests_in_flight": 0, "hinfer_engine_lanes_busy": 0, "hinfer_engine_queue_depth": 0,
        "hinfer_batches_running": 0}


def _paths(o, pre=()):
    yield pre
    items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
    for k, v in items:
        yield from _paths(v, (*pre, k))


def _cap(o) -> None:
    """Token budgets and `n` small, so a mutated request ends soon on a CPU; a background response always has one
    (it runs on after its client leaves, which a POST still waiting for its first token may do unseen)."""
    if isinstance(o, dict):
        if o.get("background") is True:
            o["max_output_tokens"] = 8
        for k, v in o.items():
            if k in BUDGETS and type(v) is int and v > 16:
                o[k] = 8
            elif k == "n" and type(v) is int and v > 3:
                o[k] = 2
            else:
                _cap(v)
    elif isinstance(o, list):
        for v in o:
            _cap(v)


def mutated(rng: random.Random, body: dict) -> dict:
    b = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(b) if p]
        if not paths:
            break
        p = rng.choice(paths)
        parent = b
        for k in p[:-1]:
            parent = parent[k]
        r = rng.random()
        if r < 0.2:
            del parent[p[-1]]
        elif r < 0.8:
            parent[p[-1]] = copy.deepcopy(rng.choice(ODD))
        elif isinstance(parent, dict):
            parent[rng.choice(ADDED)] = copy.deepcopy(rng.choice(ODD))
    _cap(b)
    return b


def batch_input(model: str) -> bytes:
    """A batch input file of two short chat requests (uploaded once; the /v1/batches bodies name it)."""
    return "".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": model, "max_tokens": 8, "messages": [{"role": "user", "content": f"hi {i}"}]}}) + "\n"
                   for i in range(2)).encode()  # fmt: skip


def request(rng: random.Random, model: str, file_id: str = "") -> tuple[str, bytes]:
    path, body = rng.choice(BODIES)
    if path == "/v1/batches":
        body = {**body, "input_file_id": file_id}
    elif path == "/v1/messages/batches":  # the model goes in each request's params
        body = {"requests": [{**r, "params": {"model": model, **r["params"]}} for r in body["requests"]]}
    elif not path.startswith("/v1/conversations"):
        body = {"model": model, **body}
    kind = rng.random()
    if kind < 0.15:
        text = json.dumps(body)
    elif kind < 0.9:
        text = json.dumps(mutated(rng, body))
    else:
        text = rng.choice(["", "{", "[]", "null", "\"x\"", json.dumps(body)[: rng.randint(0, 50)]])
    return path, text.encode("utf-8", "surrogatepass")


async def _send(client: httpx.AsyncClient, method: str, url: str, data: bytes | None, cut: int | None,
                bad: list, what: str) -> bytes:  # fmt: skip
    """The answer's first 4 KB (a 5xx or a transport error noted in `bad`); the client leaves after `cut` chunks."""
    head = b""
    try:
        async with client.stream(method, url, content=data, headers={"content-type": "application/json"}) as r:
            n = 0
            async for chunk in r.aiter_bytes():
                head, n = (head + chunk)[:4096], n + 1
                if cut is not None and n >= cut:
                    break
            if r.status_code >= 500:
                bad.append(f"{r.status_code} {what}")
    except httpx.HTTPError as e:
        bad.append(f"{type(e).__name__} {what}")
    return head


async def _one(client: httpx.AsyncClient, base: str, path: str, data: bytes, cut: int | None, follow, bad: list,
               started: list) -> None:  # fmt: skip
    head = await _send(client, "POST", base + path, data, cut, bad, f"{path} {data[:400]!r}")
    found = RESPONSE_ID.search(head) if b'"background"' in data else None
    if found:  # a background response: read it, stream it again, cancel or delete it while it may still run
        started.append(found.group(1).decode())
        if follow:
            method, tail = follow
            url = f"{base}/v1/responses/{started[-1]}{tail}"
            await _send(client, method, url, None, cut, bad, f"{method} {url} after {data[:200]!r}")


TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


async def _socket(base: str, model: str, seed: int, messages: int, timeout: float, bad: list) -> None:
    """`messages` Responses bodies, mutated, as response.create messages over one WebSocket: each must end in a
    terminal event or an error event (5xx ones and failed responses are problems), the socket never closed by the
    server; sometimes the client leaves mid-answer (the server must stop that generation)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    rng = random.Random(seed)
    bodies = [b for p, b in BODIES if p == "/v1/responses"]
    sent = b""
    try:
        async with connect(base.replace("http", "ws", 1) + "/v1/responses", max_size=None) as ws:
            for _ in range(messages):
                body = {k: v for k, v in rng.choice(bodies).items() if k not in ("stream", "background")}
                msg = {"type": "response.create", "model": model, **body}
                sent = json.dumps(mutated(rng, msg) if rng.random() < 0.7 else msg).encode("utf-8", "surrogatepass")
                await ws.send(sent.decode("utf-8", "replace"))
                leave = rng.random() < 0.2
                deadline = time.monotonic() + 3 * timeout  # a mutated budget may ask for the whole context: leave
                while True:
                    if time.monotonic() > deadline:
                        return  # the socket closes behind us: the server must stop that generation
                    e = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                    if e.get("type") == "response.failed" or (e.get("type") == "error" and e.get("status", 0) >= 500):
                        bad.append(f"socket {e.get('type')} {json.dumps(e)[:300]} after {sent[:300]!r}")
                    if leave:
                        return  # mid-answer: the socket closes behind us
                    if e.get("type") in TERMINAL:
                        break
    except TimeoutError:
        pass  # a long answer: leaving is a case too
    except WebSocketException as e:
        bad.append(f"socket {type(e).__name__}: {e} after {sent[:300]!r}")


def metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[-1]
            if name.startswith(("hinfer_engine_", "hinfer_requests_in_flight")):
                out[name] = float(value)
            elif name == "hinfer_batches_running":  # one sample per batch API
                out[name] = out.get(name, 0.0) + float(value)
    return out


def leaks(m: dict[str, float]) -> list[str]:
    out = [f"{k} = {m.get(k)} (want {v})" for k, v in IDLE.items() if m.get(k) != v]
    for what in ("pages", "slots"):
        total, free = m.get(f"hinfer_engine_{what}_total"), m.get(f"hinfer_engine_{what}_free")
        if total is not None and free != total:
            out.append(f"{what}: {free} of {total} free")
    return out


async def fuzz(base: str, requests: int, seed: int, concurrency: int, timeout: float) -> list[str]:
    rng = random.Random(seed)
    bad: list[str] = []
    async with httpx.AsyncClient(timeout=timeout) as client:
        model = (await client.get(base + "/v1/models")).json()["data"][0]["id"]
        upload = await client.post(base + "/v1/files", files={"file": ("in.jsonl", batch_input(model))},
                                   data={"purpose": "batch"})  # fmt: skip
        file_id = upload.json().get("id", "") if upload.status_code == 200 else ""
        jobs = []
        for _ in range(requests):
            path, data = request(rng, model, file_id)
            jobs.append((path, data, rng.randint(1, 3) if rng.random() < 0.3 else None, rng.choice(FOLLOW)))
        gate = asyncio.Semaphore(concurrency)

        async def run(job) -> None:
            async with gate:
                try:
                    await asyncio.wait_for(_one(client, base, *job, bad, started), timeout)
                except TimeoutError:
                    pass  # a long answer: the client leaves, which is a case too

        started: list[str] = []
        await asyncio.gather(*(run(j) for j in jobs))
        await asyncio.gather(*(_socket(base, model, seed * 1000 + i, 6, timeout, bad)
                               for i in range(max(2, requests // 100))))  # fmt: skip
        for rid in started:  # background runs whose budget a mutation dropped go on past the fuzz: stop them
            await _send(client, "POST", f"{base}/v1/responses/{rid}/cancel", None, None, bad, f"cancel {rid}")
        for _ in range(60):  # aborted requests free their lanes at the engine's next steps
            m = metrics((await client.get(base + "/metrics")).text)
            if not leaks(m):
                break
            await asyncio.sleep(1)
    return bad + leaks(m)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_url", help="the server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a request may take before the client leaves")
    a = ap.parse_args()
    problems = asyncio.run(fuzz(a.base_url.rstrip("/"), a.requests, a.seed, a.concurrency, a.timeout))
    print(f"{a.requests} requests (seed {a.seed}): {len(problems)} problems")
    for p in problems[:50]:
        print(" ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
