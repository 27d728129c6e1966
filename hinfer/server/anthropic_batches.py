"""Anthropic Message Batches: many /v1/messages requests answered in the background, their results read later.

A batch's requests run through the server's own /v1/messages route in process (an ASGI client on the app: the
same validation, errors and engine as any request, with the creator's credentials), at most as many at once as
the engine has lanes, so interactive requests keep their place in its queue; a request the engine refuses for
load (429) waits and tries again. Each ends as `succeeded` (the Message), `errored` (the route's error body) or
`canceled` (the batch was cancelled before it ran). The batch is `in_progress` until every request has ended,
`canceling` between a cancel and that, then `ended`, when its results are readable as JSONL in the requests'
order. Batches live in memory: the newest KEPT_BATCHES, an ended one dropped first (deleting one drops it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from hinfer.server.errors import bad_request
from hinfer.server.ids import new_id
from hinfer.server.kept_jobs import KeptJobs, in_process_client, post_until_taken

log = logging.getLogger(__name__)

KEPT_BATCHES = 64  # batches kept in memory, running or ended
MAX_REQUESTS = 10_000  # requests in one batch
CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
FORWARDED = ("authorization", "x-api-key", "anthropic-version", "anthropic-beta")


def _iso(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


@dataclass
class MessageBatch:
    id: str
    requests: list[tuple[str, dict[str, Any]]]  # (custom_id, params) in the creator's order
    results_url: str  # where the results are read once the batch has ended
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id -> its `result`
    cancel_initiated_at: datetime | None = None
    ended_at: datetime | None = None
    task: asyncio.Task | None = None

    @property
    def waiting(self) -> int:
        return len(self.requests) - len(self.results)

    @property
    def status(self) -> str:
        if self.ended_at is not None:
            return "ended"
        return "canceling" if self.cancel_initiated_at is not None else "in_progress"

    def counts(self) -> dict[str, int]:
        out = {"processing": len(self.requests) - len(self.results), "succeeded": 0, "errored": 0, "canceled": 0,
               "expired": 0}  # fmt: skip
        for r in self.results.values():
            out[r["type"]] += 1
        return out

    def body(self) -> dict[str, Any]:
        """The batch object as the API shows it."""
        return {"id": self.id, "type": "message_batch", "processing_status": self.status,
                "request_counts": self.counts(), "ended_at": _iso(self.ended_at),
                "created_at": _iso(self.created_at), "expires_at": _iso(self.created_at + timedelta(hours=24)),
                "archived_at": None, "cancel_initiated_at": _iso(self.cancel_initiated_at),
                "results_url": self.results_url if self.ended_at is not None else None}  # fmt: skip

    def result_lines(self) -> list[bytes]:
        return [json.dumps({"custom_id": cid, "result": self.results[cid]}, ensure_ascii=False).encode() + b"\n"
                for cid, _ in self.requests if cid in self.results]  # fmt: skip


def parse_requests(requests: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The create body's (custom_id, params): 1..MAX_REQUESTS of them, custom ids well formed and distinct; else a
    400."""
    if not 1 <= len(requests) <= MAX_REQUESTS:
        raise bad_request(f"requests: a list of 1 to {MAX_REQUESTS} requests", param="requests")
    seen = set()
    for i, (cid, _) in enumerate(requests):
        if not CUSTOM_ID.fullmatch(cid):
            raise bad_request(f"requests.{i}.custom_id: 1 to 64 letters, digits, '_' or '-'", param="requests")
        if cid in seen:
            raise bad_request(f"requests.{i}.custom_id: '{cid}' is used twice", param="requests")
        seen.add(cid)
    return requests


class MessageBatches(KeptJobs[MessageBatch]):
    def __init__(self) -> None:
        super().__init__(KEPT_BATCHES, "message batches")

    def create(self, requests: list[tuple[str, dict[str, Any]]], base_url: str, app: Any, headers: dict[str, str],
               lanes: int) -> MessageBatch:  # fmt: skip
        """Keep a new batch and start running it."""
        bid = new_id("msgbatch_")
        batch = MessageBatch(bid, requests, f"{base_url.rstrip('/')}/v1/messages/batches/{bid}/results")
        return self.start(batch, _run(batch, app, headers, max(1, lanes)))

    def cancel(self, batch: MessageBatch) -> None:
        """Stop a running batch: its requests still waiting or running end `canceled` (running ones are stopped)."""
        if batch.ended_at is None and batch.cancel_initiated_at is None:
            batch.cancel_initiated_at = datetime.now(UTC)
            super().cancel(batch)

    def delete(self, batch: MessageBatch) -> None:
        if batch.ended_at is None:
            raise bad_request(f"Message batch '{batch.id}' is still {batch.status}: cancel it first, then delete it",
                              param="message_batch_id")  # fmt: skip
        self.pop(batch.id)


async def _run(batch: MessageBatch, app: Any, headers: dict[str, str], lanes: int) -> None:
    gate = asyncio.Semaphore(lanes)
    try:
        async with in_process_client(app, headers) as client:

            async def one(cid: str, params: dict[str, Any]) -> None:
                async with gate:
                    batch.results[cid] = await _answer(client, params)

            await asyncio.gather(*(one(cid, params) for cid, params in batch.requests))
    except asyncio.CancelledError:
        pass  # a cancel: what has not ended is canceled below
    except Exception:  # a defect: the batch still ends, its unanswered requests errored
        log.exception("message batch %s failed", batch.id)
        for cid, _ in batch.requests:
            batch.results.setdefault(cid, _errored(500, "the batch stopped on an internal error"))
    finally:
        for cid, _ in batch.requests:
            batch.results.setdefault(cid, {"type": "canceled"})
        batch.ended_at = datetime.now(UTC)
        c = batch.counts()
        log.info("message batch %s ended: %d succeeded, %d errored, %d canceled", batch.id, c["succeeded"],
                 c["errored"], c["canceled"])  # fmt: skip


async def _answer(client: httpx.AsyncClient, params: dict[str, Any]) -> dict[str, Any]:
    """One request through /v1/messages (not streamed), tried again while the engine refuses it for load."""
    r = await post_until_taken(client, "/v1/messages", {**params, "stream": False})
    try:
        body = r.json()
    except ValueError:
        body = None
    if r.status_code == 200 and isinstance(body, dict):
        return {"type": "succeeded", "message": body}
    if isinstance(body, dict) and body.get("type") == "error":
        return {"type": "errored", "error": body}
    return _errored(r.status_code, r.text[:1000])


def _errored(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "api_error"
    return {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": message}}}
