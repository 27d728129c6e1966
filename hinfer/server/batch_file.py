"""Requests from a JSONL file in OpenAI's Batch API format, run through the server's own routes in process (no
socket), their answers written to a JSONL file in the Batch API's output format (`hinfer batch`).

Input line: {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions", "body": {...}}; `url` one of
URLS. Output line, in the input's order: {"id": "batch_req_...", "custom_id": ..., "response": {"status_code",
"request_id", "body"}, "error": null}, or for a line that is no request at all {"response": null, "error":
{"code", "message"}}. A request's own 4xx stays its response (status and error body), as the Batch API keeps it;
one the engine refuses for load (429) waits and goes again.
`stream` is turned off (and a Responses request's `background`): a batch answer is one finished JSON body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from hinfer.server.ids import new_id
from hinfer.server.kept_jobs import in_process_client, post_until_taken

log = logging.getLogger(__name__)
URLS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")


@dataclass
class BatchSummary:
    lines: int = 0
    ok: int = 0  # answered 200
    failed: int = 0  # answered otherwise, or not a request
    seconds: float = 0.0


def _line_error(custom_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"id": new_id("batch_req_"), "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": message}}


async def answer_line(client: httpx.AsyncClient, line: str, n: int) -> dict[str, Any]:
    """One input line -> its output line."""
    try:
        req = json.loads(line)
    except ValueError as e:
        return _line_error(None, "invalid_json", f"line {n}: not JSON ({e})")
    if not isinstance(req, dict):
        return _line_error(None, "invalid_request", f"line {n}: not a JSON object")
    custom_id = req.get("custom_id")
    url, body = req.get("url"), req.get("body")
    if req.get("method", "POST") != "POST" or url not in URLS:
        return _line_error(custom_id, "invalid_url", f"line {n}: method POST and url one of {', '.join(URLS)}")
    if not isinstance(body, dict):
        return _line_error(custom_id, "invalid_request", f"line {n}: body must be a JSON object")
    off = {"stream": False, "background": False} if url == "/v1/responses" else {"stream": False}
    r = await post_until_taken(client, url, {**body, **off})  # a batch's answer is the whole body, now
    try:
        answer = r.json()
    except ValueError:
        answer = {"error": {"message": r.text[:1000]}}
    return {"id": new_id("batch_req_"), "custom_id": custom_id,
            "response": {"status_code": r.status_code, "request_id": r.headers.get("x-request-id"), "body": answer},
            "error": None}


async def run_batch(app: Any, lines: Iterable[str], write: Callable[[str], None], concurrency: int,
                    progress: Callable[[int], None] | None = None) -> BatchSummary:  # fmt: skip
    """Answer every non-blank line through `app` (an ASGI app: the server's), at most `concurrency` at once, and
    `write` each output line (with its newline) in the input's order as soon as those before it are written."""
    summary, t0 = BatchSummary(), time.monotonic()
    todo = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    summary.lines = len(todo)
    gate = asyncio.Semaphore(concurrency)
    async with in_process_client(app) as client:

        async def one(n: int, line: str) -> dict[str, Any]:
            async with gate:
                return await answer_line(client, line, n)

        tasks = [asyncio.create_task(one(n, line)) for n, line in todo]
        for done, task in enumerate(tasks, 1):  # in order: a finished later line waits for the ones before it
            out = await task
            good = out["error"] is None and out["response"]["status_code"] == 200
            summary.ok += good
            summary.failed += not good
            write(json.dumps(out, ensure_ascii=False) + "\n")
            if progress is not None:
                progress(done)
    summary.seconds = time.monotonic() - t0
    return summary
