"""The Responses API over a WebSocket (`/v1/responses` upgraded: OpenAI's WebSocket mode, which Codex CLI tries
first on its OpenAI provider).

Each `{"type": "response.create", ...}` message is a create request's body (`stream` is implied, `background` is
refused) and is answered by the events a streamed POST sends, one JSON text message each, one response at a
time. The connection keeps its last response, so the next may continue it by `previous_response_id` with only
the new input, `store` false or not. `"generate": false` answers a response with no output (a client warming the
connection up) that the next may continue. A bad message is answered by an `error` event (`status` and the HTTP
API's `error` object); the connection stays open. The API key and the drain are checked at the handshake
(middleware.py). The socket is read all the time, also while a response runs (messages wait their turn), so a
client that closes it is noticed at once: its run is aborted (EngineRun.watch), not left to generate for nobody
(a compaction's summary sends nothing until it is done).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from hinfer.server import compaction
from hinfer.server.errors import APIError, bad_request, describe_validation_errors, openai_body
from hinfer.server.generation import EngineRun
from hinfer.server.ids import new_id
from hinfer.server.responses_routes import history, response_events, started_run
from hinfer.server.responses_store import StoredResponse, size_of
from hinfer.server.responses_stream import ResponseBuilder
from hinfer.server.schemas_responses import ResponsesRequest
from hinfer.server.state import ServerState

log = logging.getLogger(__name__)
router = APIRouter()


def _body(text: str) -> tuple[ResponsesRequest, bool]:
    """A client message -> (the create request it carries, whether to generate)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise bad_request(f"a message must be a JSON object: {e}") from e
    if not isinstance(data, dict) or data.get("type") != "response.create":
        raise bad_request("expected a 'response.create' message", param="type")
    if data.get("background"):
        raise bad_request("background responses are not taken over a WebSocket", param="background")
    generate = data.pop("generate", True)
    if not isinstance(generate, bool):
        raise bad_request("generate must be a boolean", param="generate")
    data.pop("type")
    try:
        return ResponsesRequest.model_validate({**data, "stream": True}), generate
    except ValidationError as e:
        message, param = describe_validation_errors(e.errors())
        raise bad_request(message, param=param) from None


async def _read(ws: WebSocket, inbox: asyncio.Queue[str | None], closed: asyncio.Event) -> None:
    """The client's messages into `inbox` as they come; at the close, `closed` set and a None queued."""
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            text = msg.get("text")
            inbox.put_nowait(text if text is not None else (msg.get("bytes") or b"").decode("utf-8", "replace"))
    except (WebSocketDisconnect, RuntimeError, ConnectionError):
        pass
    finally:
        closed.set()
        inbox.put_nowait(None)


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    await ws.accept()
    st = ws.app.state.hinfer
    last: StoredResponse | None = None  # the connection's last response: the next may continue it
    ws.state.closed = closed = asyncio.Event()  # what the runs on this socket watch (EngineRun.watch)
    inbox: asyncio.Queue[str | None] = asyncio.Queue()
    reader = asyncio.create_task(_read(ws, inbox, closed))
    try:
        while (text := await inbox.get()) is not None:
            try:
                body, generate = _body(text)
                st.check_model(body.model)
                if not generate:
                    last = await _warm_up(ws, body, history(st, body, last) if body.input or
                                          body.previous_response_id else [])  # fmt: skip
                    continue
                items, compacting = compaction.split_trigger(history(st, body, last))
                run, b = await started_run(st, body, items, ws, compacting)
            except APIError as err:
                await ws.send_text(json.dumps({"type": "error", "status": err.status, **openai_body(err)}))
                continue
            last = await _answer(ws, st, run, b, items) or last
    except WebSocketDisconnect:
        pass
    finally:
        reader.cancel()


async def _answer(ws: WebSocket, st: ServerState, run: EngineRun, b: ResponseBuilder, items: list[dict[str, Any]]
                  ) -> StoredResponse | None:  # fmt: skip
    """One response's events sent as they come; -> what the next may continue (None: it failed)."""
    try:
        async with contextlib.aclosing(response_events(st, run, b, items)) as events:
            async for e in events:
                await ws.send_text(json.dumps(e))
    except (WebSocketDisconnect, ConnectionError):
        raise WebSocketDisconnect() from None
    return None if b.status == "failed" else StoredResponse(b.response(), items, size_of(items))


async def _warm_up(ws: WebSocket, body: ResponsesRequest, items: list[dict[str, Any]]) -> StoredResponse:
    """`generate: false`: a completed response with no output, for the next to continue."""
    resp = {"id": new_id("resp_"), "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": body.model, "output": [], "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
    for i, typ in enumerate(("response.created", "response.completed")):
        await ws.send_text(json.dumps({"type": typ, "sequence_number": i, "response": resp}))
    return StoredResponse(resp, items, size_of(items))
