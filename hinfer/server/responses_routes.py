"""OpenAI Responses routes: POST /v1/responses, GET and DELETE /v1/responses/{id}, POST
/v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items, POST /v1/responses/input_tokens, POST
/v1/responses/compact."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection

from hinfer.server import compaction, sse
from hinfer.server.conversations_routes import check_room, conversation_or_404
from hinfer.server.errors import APIError, bad_request
from hinfer.server.generation import EngineRun, engine_error, log_failure, run_to_end
from hinfer.server.images import with_images
from hinfer.server.item_pages import PageQuery, listed_item
from hinfer.server.openapi_responses import OPENAI_ERRORS, STREAMED
from hinfer.server.prompt import render_prompt_off_loop
from hinfer.server.responses_background import EventLog
from hinfer.server.responses_compact import prepared
from hinfer.server.responses_convert import chat_prompt, input_items
from hinfer.server.responses_run import start
from hinfer.server.responses_store import StoredResponse
from hinfer.server.responses_stream import ResponseBuilder
from hinfer.server.schemas_responses import CompactRequest, InputTokensRequest, ResponsesRequest
from hinfer.server.state import ServerState, get_state

log = logging.getLogger(__name__)
router = APIRouter(responses=OPENAI_ERRORS)


def conversation_id(body: InputTokensRequest) -> str | None:
    """The Conversations API id a request continues (`conversation`: the id, or {"id": ...}), or None."""
    conv = body.conversation
    if conv is None:
        return None
    conv = conv.get("id") if isinstance(conv, dict) else conv
    if not isinstance(conv, str) or not conv:
        raise bad_request("conversation must be a conversation id or {'id': ...}", param="conversation")
    if body.previous_response_id is not None:
        raise bad_request("conversation and previous_response_id cannot both be given", param="conversation")
    return conv


def history(st: ServerState, body: InputTokensRequest, local: StoredResponse | None = None) -> list[dict[str, Any]]:
    """The whole conversation as input items: the stored one `previous_response_id` continues (`local`: a
    WebSocket's last response, kept on its connection whatever its `store`), or the conversation's items, then
    `input`."""
    items = input_items(body.input)
    if (conv_id := conversation_id(body)) is not None:
        conv = conversation_or_404(st.conversations, conv_id, param="conversation")
        check_room(st.conversations, conv_id, param="conversation")
        return [*conv.items, *items]
    if body.previous_response_id is None:
        if not items:
            raise bad_request("input is empty", param="input")
        return items
    prev = local if local is not None and local.response["id"] == body.previous_response_id else \
        st.responses.get(body.previous_response_id)
    if prev is None:
        raise bad_request(f"Previous response with id '{body.previous_response_id}' not found (responses are "
                          "kept in memory, for a bounded number of them, and only with store: true)",
                          param="previous_response_id", code="previous_response_not_found")
    if prev.response["status"] == "in_progress":  # a background response still generating has no output yet
        raise bad_request(f"Previous response with id '{body.previous_response_id}' is still in progress; wait "
                          "for it (GET /v1/responses/{id}) or cancel it", param="previous_response_id")
    return [*prev.history, *prev.response["output"], *items]


@router.post("/v1/responses", responses=STREAMED)
async def create_response(body: ResponsesRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    if body.background and not body.store:
        raise bad_request("background responses are kept to be read later: they need store: true",
                          param="background")
    items, compacting = compaction.split_trigger(history(st, body))
    run, b = await started_run(st, body, items, request, compacting)
    if body.background:  # from here on without the client: the response is read with GET, or cancelled
        run.unwatch()
        resp = b.response()
        st.responses.put(resp, items)
        events = EventLog() if body.stream else None
        st.background.start(b.id, _in_background(st, run, b, items, events), events)
        if events is None:
            return JSONResponse(resp)
        return StreamingResponse(_follow(events, -1), media_type="text/event-stream", headers=sse.STREAM_HEADERS)
    if body.stream:
        run.unwatch()
        return StreamingResponse(_stream(st, run, b, items), media_type="text/event-stream",
                                 headers=sse.STREAM_HEADERS, background=BackgroundTask(run.close))
    await run_to_end(run, b.feed)
    b.finish_events()
    resp = b.response()
    remember(st, body, items, resp)
    return JSONResponse(resp)


async def started_run(st: ServerState, body: ResponsesRequest, items: list[dict[str, Any]],
                      http: HTTPConnection, compacting: bool) -> tuple[EngineRun, ResponseBuilder]:  # fmt: skip
    """The request's generation started over the conversation `items`, or, past its `context_management`
    threshold, over the summary a compaction run wrote first, whose item then leads the output
    (responses_compact.py); `compacting`: the conversation's summary, answered as one compaction item
    (compaction.py)."""
    p, compacted = await prepared(st, body, items, http, compacting)
    run, b = await start(st, body, p, http)
    if compacted is not None:
        b.lead_with(compacted.item, compacted.usage)
    return run, b


@router.post("/v1/responses/compact")
async def compact_conversation(body: CompactRequest, request: Request):
    """OpenAI's compaction endpoint: the conversation's user messages, then one compaction item carrying the
    model's summary of it (compaction.py), to send as the next request's input instead of the conversation."""
    st = get_state(request)
    st.check_model(body.model)
    for field in ("stream", "background"):
        if getattr(body, field):
            raise bad_request(f"{field} is not taken by /v1/responses/compact: it answers when the summary is done",
                              param=field)
    items, _ = compaction.split_trigger(history(st, body))
    run, b = await started_run(st, body, items, request, compacting=True)
    await run_to_end(run, b.feed)
    b.finish_events()
    return {"id": b.id, "object": "response.compaction", "created_at": b.created_at,
            "output": [*compaction.kept_user_messages(items), *b.output], "usage": b.usage()}


def remember(st: ServerState, body: ResponsesRequest, items: list[dict[str, Any]], resp: dict[str, Any]) -> None:
    """A finished response: stored (`store`), and its input and output added to its conversation, if any."""
    if body.store:
        st.responses.put(resp, items)
    if (conv_id := conversation_id(body)) is not None:
        st.conversations.add_items(conv_id, [*compaction.without_trigger(input_items(body.input)), *resp["output"]])


async def response_events(st: ServerState, run: EngineRun, b: ResponseBuilder,
                          items: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """A streamed response's events as they come, the finished response remembered before its last events (a
    client may chain at once); an engine failure ends them with `response.failed`. The run is closed on every
    path (the SSE stream's and the WebSocket's: responses_socket.py)."""
    try:
        for e in b.start_events():
            yield e
        async for ev in run.events():
            for e in b.feed(ev):
                yield e
        events = b.finish_events()
        remember(st, b.body, items, b.response())
        for e in events:
            yield e
    except Exception as exc:
        log_failure(run, exc)
        yield b.failed_event(engine_error(exc))
    finally:
        await run.close()


async def _stream(st: ServerState, run: EngineRun, b: ResponseBuilder,
                  items: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for e in response_events(st, run, b, items):
        yield sse.event(e["type"], e)


async def _in_background(st: ServerState, run: EngineRun, b: ResponseBuilder, items: list[dict[str, Any]],
                         events: EventLog | None) -> None:  # fmt: skip
    """Drive a background run to its end and store what it ended as (completed, incomplete, failed with its
    error, or cancelled), its stream events written to `events` if it streams; the run is closed on every path
    (run_to_end's), so its lane is freed."""
    record = events.add if events is not None else lambda _: None
    try:
        record(b.start_events())
        await run_to_end(run, lambda ev: record(b.feed(ev)))
        final = b.finish_events()
        remember(st, b.body, items, b.response())  # before the last event: a client may chain at once
        record(final)
    except asyncio.CancelledError:
        await run.close()
        b.status = "cancelled"
        st.responses.put(b.response(), items)
        log.info("%s cancelled after %d tokens", run.request_id, run.completion_tokens)
        raise
    except APIError as e:
        failed = b.failed_event(e)
        st.responses.put(failed["response"], items)
        record([failed])


async def _follow(events: EventLog, after: int) -> AsyncIterator[bytes]:
    """A background response's events after sequence number `after`, as they come (leaving stops only this)."""
    async for e in events.follow(after):
        yield sse.event(e["type"], e)


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id '{response_id}' not found (responses are kept in memory, for a "
                         "bounded number of them, and only with store: true)", param="response_id")


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(body: InputTokensRequest, request: Request):
    """The prompt a create request with these fields would render, counted: the conversation (a stored
    `previous_response_id` included), instructions, tools, images."""
    st = get_state(request)
    if body.model is not None:
        st.check_model(body.model)
    items, compacting = compaction.split_trigger(history(st, body))
    prompt, _, _ = chat_prompt(body, items, st.preserve_thinking_default, compacting)
    ids = await render_prompt_off_loop(st.tokenizer, prompt, st.prompt_guard)
    ids, _ = await with_images(st, prompt, ids, param="input")
    return {"object": "response.input_tokens", "input_tokens": len(ids)}


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request, query: PageQuery = Depends()):
    """The input items the stored response answered (the whole conversation it continued), newest first unless
    `order=asc`, `limit` per page, the page after item `after`."""
    entry = get_state(request).responses.get(response_id)
    if entry is None:
        raise _not_found(response_id)
    items = [listed_item(it, f"item_{response_id.removeprefix('resp_')}_{i}") for i, it in enumerate(entry.history)]
    return query.page(items, f"response '{response_id}'")


@router.get("/v1/responses/{response_id}", responses=STREAMED)
async def get_response(response_id: str, request: Request, stream: bool = False, starting_after: int | None = None):
    """The stored response; with `stream`, a background response created streaming streamed again from the
    event after `starting_after` (from its first without), as it goes on."""
    st = get_state(request)
    entry = st.responses.get(response_id)
    if entry is None:
        raise _not_found(response_id)
    if not stream:
        return entry.response
    events = st.background.events(response_id)
    if events is None:
        raise bad_request("only a background response created with stream: true can be streamed again (and only "
                          "the last ones that ended)", param="stream")
    start = -1 if starting_after is None else starting_after
    return StreamingResponse(_follow(events, start), media_type="text/event-stream", headers=sse.STREAM_HEADERS)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request):
    """Stop a background response: its generation ends and it is stored `cancelled`. One that already ended is
    returned as it is; a response made without `background` is not cancellable (400)."""
    st = get_state(request)
    entry = st.responses.get(response_id)
    if entry is None and not st.background.running(response_id):
        raise _not_found(response_id)
    if entry is not None and not entry.response.get("background"):
        raise bad_request("only responses created with background: true can be cancelled", param="response_id")
    await st.background.cancel(response_id)
    entry = st.responses.get(response_id)
    if entry is None:  # dropped from the store between the cancel and now (the store is bounded)
        raise _not_found(response_id)
    return entry.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request):
    st = get_state(request)
    await st.background.cancel(response_id)  # a running background response stops first (else it would come back)
    st.background.forget(response_id)
    if not st.responses.delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response", "deleted": True}
