"""OpenAI Batches: an uploaded JSONL file of requests (the Batch API's input format, as `hinfer batch` reads it)
answered in the background, its answers written to an output file and its failures to an error file.

Each line goes through the server's own route in process (batch_file's answer: an ASGI client on the app, the
creator's key forwarded), at most as many at once as the engine has lanes; a request the engine refuses for load
(429) waits and goes again. The batch is `in_progress` until every line has an answer, then `completed` with
`output_file_id` (the lines answered 200, in the input's order) and `error_file_id` (the others: a request's 4xx,
a line that is no request, a line for another endpoint); `cancelling` and `cancelled` after a cancel (the lines
answered by then are still written). An input that is no JSONL of requests for the batch's endpoint is refused
when the batch is created (400). Batches live in memory: the newest KEPT_BATCHES (an ended one dropped first).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from hinfer.server.batch_file import answer_line
from hinfer.server.errors import APIError, bad_request
from hinfer.server.files_store import FileStore
from hinfer.server.ids import new_id
from hinfer.server.kept_jobs import KeptJobs, in_process_client

log = logging.getLogger(__name__)

KEPT_BATCHES = 64
MAX_LINES = 50_000  # requests in one batch (OpenAI's limit)
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
FORWARDED = ("authorization", "x-api-key")


@dataclass
class Batch:
    id: str
    endpoint: str
    input_file_id: str
    lines: list[str]
    completion_window: str
    metadata: dict[str, str] | None
    created_at: int = field(default_factory=lambda: int(time.time()))
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)  # line index -> its output line
    status: str = "in_progress"
    in_progress_at: int | None = None
    cancelling_at: int | None = None
    ended_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    task: asyncio.Task | None = None

    @property
    def waiting(self) -> int:
        return len(self.lines) - len(self.answers)

    def body(self) -> dict[str, Any]:
        failed = sum(1 for a in self.answers.values() if not _ok(a))
        ended = {"completed": "completed_at", "cancelled": "cancelled_at", "failed": "failed_at"}.get(self.status)
        times = {k: None for k in ("completed_at", "cancelled_at", "failed_at", "finalizing_at", "expired_at")}
        if ended is not None:
            times[ended] = self.ended_at
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint, "errors": None,
                "input_file_id": self.input_file_id, "completion_window": self.completion_window,
                "status": self.status, "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "created_at": self.created_at, "in_progress_at": self.in_progress_at,
                "expires_at": self.created_at + 86400, "cancelling_at": self.cancelling_at, **times,
                "request_counts": {"total": len(self.lines), "completed": len(self.answers) - failed,
                                   "failed": failed},
                "metadata": self.metadata}  # fmt: skip


def _ok(answer: dict[str, Any]) -> bool:
    return answer["error"] is None and answer["response"]["status_code"] == 200


def input_lines(data: bytes, endpoint: str) -> list[str]:
    """The file's request lines (blank ones skipped): a 400 when it is not UTF-8 JSONL of 1..MAX_LINES requests
    whose `url` is the batch's endpoint, with distinct custom ids."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("the input file is not UTF-8 text", param="input_file_id") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not 1 <= len(lines) <= MAX_LINES:
        raise bad_request(f"the input file holds {len(lines)} requests: 1 to {MAX_LINES}", param="input_file_id")
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        try:
            req = json.loads(line)
        except ValueError:
            raise bad_request(f"input line {n} is not JSON", param="input_file_id") from None
        if not isinstance(req, dict) or req.get("url") != endpoint:
            raise bad_request(f"input line {n}: url must be the batch's endpoint {endpoint}", param="input_file_id")
        cid = req.get("custom_id")
        if not isinstance(cid, str) or cid in seen:
            raise bad_request(f"input line {n}: custom_id must be a string, distinct in the file",
                              param="input_file_id")  # fmt: skip
        seen.add(cid)
    return lines


class Batches(KeptJobs[Batch]):
    def __init__(self) -> None:
        super().__init__(KEPT_BATCHES, "batches")

    def create(self, files: FileStore, input_file_id: str, endpoint: str, window: str, metadata: dict | None,
               app: Any, headers: dict[str, str], lanes: int) -> Batch:  # fmt: skip
        if endpoint not in ENDPOINTS:
            raise bad_request(f"endpoint: one of {', '.join(ENDPOINTS)}", param="endpoint")
        f = files.get(input_file_id)
        if f is None:
            raise APIError(404, f"No file with id '{input_file_id}'", param="input_file_id")
        if f.purpose != "batch":
            raise bad_request("the input file's purpose must be 'batch'", param="input_file_id")
        lines = input_lines(f.data, endpoint)
        batch = Batch(new_id("batch_"), endpoint, input_file_id, lines, window, metadata)
        batch.in_progress_at = batch.created_at
        return self.start(batch, _run(batch, files, app, headers, max(1, lanes)))

    def cancel(self, batch: Batch) -> None:
        if batch.ended_at is None and batch.cancelling_at is None:
            batch.status, batch.cancelling_at = "cancelling", int(time.time())
            super().cancel(batch)


async def _run(batch: Batch, files: FileStore, app: Any, headers: dict[str, str], lanes: int) -> None:
    gate = asyncio.Semaphore(lanes)
    try:
        async with in_process_client(app, headers) as client:

            async def one(i: int, line: str) -> None:
                async with gate:
                    batch.answers[i] = await answer_line(client, line, i + 1)

            await asyncio.gather(*(one(i, line) for i, line in enumerate(batch.lines)))
        batch.status = "completed"
    except asyncio.CancelledError:
        batch.status = "cancelled"
    except Exception:  # a defect: the batch ends failed, what it answered still written
        log.exception("batch %s failed", batch.id)
        batch.status = "failed"
    finally:
        _write_files(batch, files)
        batch.ended_at = int(time.time())
        log.info("batch %s %s: %d of %d lines answered", batch.id, batch.status, len(batch.answers), len(batch.lines))


def _write_files(batch: Batch, files: FileStore) -> None:
    """The output file (lines answered 200) and the error file (the others), each in the input's order; a file
    the store has no room for is logged and left out."""
    done = [batch.answers[i] for i in sorted(batch.answers)]
    for attr, keep in (("output_file_id", True), ("error_file_id", False)):
        part = [a for a in done if _ok(a) == keep]
        if not part:
            continue
        data = "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in part).encode()
        try:
            setattr(batch, attr, files.add(f"{batch.id}_{attr[:-8]}.jsonl", "batch_output", data).id)
        except APIError as e:
            log.warning("batch %s: its %s file is not stored: %s", batch.id, attr[:-8], e)
