"""Anthropic Message Batches routes: create, retrieve, list, cancel, delete, results (anthropic_batches.py)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from hinfer.server.anthropic_batches import FORWARDED, MessageBatch, parse_requests
from hinfer.server.drain import shutting_down_error
from hinfer.server.errors import APIError, bad_request
from hinfer.server.openapi_responses import ANTHROPIC_ERRORS
from hinfer.server.schemas_anthropic import MessageBatchCreateRequest
from hinfer.server.state import ServerState, get_state

router = APIRouter(responses=ANTHROPIC_ERRORS)


def _batch(st: ServerState, batch_id: str) -> MessageBatch:
    batch = st.message_batches.get(batch_id)
    if batch is None:
        raise APIError(404, f"Message batch '{batch_id}' not found (batches are kept in memory, the newest "
                            "ones only)", param="message_batch_id")  # fmt: skip
    return batch


@router.post("/v1/messages/batches")
async def create_batch(body: MessageBatchCreateRequest, request: Request):
    """Start a batch of Messages requests ({"requests": [{"custom_id", "params"}, ...]}); it runs without the
    client and is read with the other routes."""
    st = get_state(request)
    if st.drain.draining:
        raise shutting_down_error()
    requests = parse_requests([(r.custom_id, r.params) for r in body.requests])
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
    batch = st.message_batches.create(requests, str(request.base_url), request.app, headers,
                                      st.engine.stats().lanes_total)  # fmt: skip
    return batch.body()


@router.get("/v1/messages/batches")
async def list_batches(request: Request, limit: int = Query(20, ge=1, le=1000), before_id: str | None = None,
                       after_id: str | None = None):  # fmt: skip
    """The kept batches, newest first, a page at a time (`after_id`: the page after that batch; `before_id`: the
    page before it)."""
    batches = get_state(request).message_batches.newest_first()
    ids = [b.id for b in batches]
    start, end = 0, len(batches)
    for cursor, name in ((after_id, "after_id"), (before_id, "before_id")):
        if cursor is not None and cursor not in ids:
            raise bad_request(f"No message batch with id '{cursor}'", param=name)
    if after_id is not None:
        start = ids.index(after_id) + 1
    if before_id is not None:
        end = ids.index(before_id)
        start = max(start, end - limit) if after_id is None else start
    page = batches[start:end][:limit]
    has_more = (start + len(page) < end) if before_id is None else start > 0
    return {"data": [b.body() for b in page], "has_more": has_more, "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None}


@router.get("/v1/messages/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request):
    return _batch(get_state(request), batch_id).body()


@router.post("/v1/messages/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request):
    """Stop a running batch: `canceling` until its running requests have stopped, then `ended`; an ended batch is
    returned as it is."""
    st = get_state(request)
    batch = _batch(st, batch_id)
    st.message_batches.cancel(batch)
    return batch.body()


@router.delete("/v1/messages/batches/{batch_id}")
async def delete_batch(batch_id: str, request: Request):
    st = get_state(request)
    st.message_batches.delete(_batch(st, batch_id))
    return {"id": batch_id, "type": "message_batch_deleted"}


@router.get("/v1/messages/batches/{batch_id}/results", response_class=Response,
            responses={200: {"content": {"application/x-jsonl": {}}, "description": "one JSON line a request"}})
async def batch_results(batch_id: str, request: Request):
    """The ended batch's results, one JSON line a request in the batch's order: {custom_id, result}."""
    batch = _batch(get_state(request), batch_id)
    if batch.ended_at is None:
        raise bad_request(f"Message batch '{batch_id}' is still {batch.status}: its results come once it has ended",
                          param="message_batch_id")  # fmt: skip
    return Response(b"".join(batch.result_lines()), media_type="application/x-jsonl")
