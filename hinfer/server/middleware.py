"""Per-request plumbing as plain ASGI (BaseHTTPMiddleware would buffer streams and hide disconnects):
request id in and out, API key check, drain refusal, request counting for /metrics, one log line per error
answer (or, with log_requests, one per request), and the last-resort 500.

Unexpected exceptions stop here rather than in Starlette's ServerErrorMiddleware: that one answers and then
re-raises, so uvicorn logs a second traceback and drops the keep-alive connection."""

from __future__ import annotations

import logging
import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hinfer.server.auth import OPEN_PATHS, authorized
from hinfer.server.drain import Drain
from hinfer.server.errors import ERROR_LOGGED_KEY, APIError, error_body
from hinfer.server.metrics import Metrics

log = logging.getLogger("hinfer.server")

_GOOD_ID = re.compile(r"^[\w\-.:/=+@]{1,128}$")  # echo only ids that are safe in a header and a log line
_COUNTED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens",
            "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize", "/tokenizer_info")
ERROR_MESSAGE_KEY = "error_message"  # scope["state"] key where the error handlers leave the message they sent


class _BodyTooLarge(HTTPException):
    """An HTTPException: FastAPI turns other errors raised while it reads the body into a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit).message)


def _limited(receive: Receive, limit: int) -> Receive:
    """`receive` that fails once the body passes `limit` bytes (a chunked body has no Content-Length)."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _BodyTooLarge(limit)
        return message

    return wrapped


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than this server's limit of {limit} bytes "
                         "(--max-body-bytes)", close=True)


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, api_key: str | None, metrics: Metrics, drain: Drain | None = None,
                 max_body_bytes: int | None = None, log_requests: bool = False,
                 open_paths: frozenset[str] = OPEN_PATHS):
        self.app = app
        self.open_paths = open_paths  # answered without a key
        self.log_requests = log_requests
        self.api_key = api_key
        self.metrics = metrics
        self.drain = drain
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        rid = given if given and _GOOD_ID.match(given) else f"req-{uuid.uuid4().hex}"
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send, headers, rid)
            return
        path: str = scope.get("path", "")
        method: str = scope.get("method", "")
        endpoint = next((p for p in _COUNTED if path == p or path.startswith(p + "/")), "other")
        started = False
        quiet = False  # the error was already logged (with its traceback)

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                MutableHeaders(scope=message).append("x-request-id", rid)
                self.metrics.request_done(endpoint, status)
                if status >= 400 and not quiet and not state.get(ERROR_LOGGED_KEY):
                    level = logging.ERROR if status >= 500 else logging.INFO
                    log.log(level, "%s %s -> %d (x-request-id %s): %s", method, path, status, rid,
                            state.get(ERROR_MESSAGE_KEY, "-"))
                elif self.log_requests:
                    log.info("%s %s -> %d (x-request-id %s)", method, path, status, rid)
            await send(message)

        if self.api_key and path not in self.open_paths and method != "OPTIONS" and not authorized(headers, self.api_key):
            err = APIError(401, "invalid or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                           code="invalid_api_key", anthropic_message="invalid x-api-key")
            await _answer(err, scope, receive, send_with_id)
            return
        if self.drain is not None and self.drain.draining and self.drain.refuses(path, method):
            await _answer(self.drain.refusal(), scope, receive, send_with_id)
            return
        limit = self.max_body_bytes
        if limit is not None:
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                await _answer(_too_large(limit), scope, receive, send_with_id)
                return
            receive = _limited(receive, limit)
        try:
            await self.app(scope, receive, send_with_id)
        except _BodyTooLarge:
            if not started:
                await _answer(_too_large(limit or 0), scope, receive, send_with_id)
        except ClientDisconnect:  # the client left (or was cut off) while sending its body: no one to answer
            log.info("%s %s: client disconnected before its request was read (x-request-id %s)", method, path, rid)
        except Exception:
            quiet = True
            log.exception("%s %s -> 500 (x-request-id %s): unhandled error", method, path, rid)
            if started:  # mid-body: nothing can be sent any more; uvicorn closes the connection
                return
            err = APIError(500, "internal server error (logged on the server with this request's x-request-id "
                                f"{rid})", code="internal_error")
            await _answer(err, scope, receive, send_with_id)


    async def _socket(self, scope: Scope, receive: Receive, send: Send, headers: Headers, rid: str) -> None:
        """A WebSocket handshake: the key and the drain checked as for a request (a refusal closes the handshake,
        which the client sees as a 403), then the route."""
        path = scope.get("path", "")
        refusal = None
        if self.api_key and path not in self.open_paths and not authorized(headers, self.api_key):
            refusal = "invalid or missing API key"
        elif self.drain is not None and self.drain.draining:
            refusal = "the server is shutting down"
        if refusal is not None:
            log.info("WEBSOCKET %s refused (x-request-id %s): %s", path, rid, refusal)
            await send({"type": "websocket.close", "code": 1008, "reason": refusal})
            return
        if self.log_requests:
            log.info("WEBSOCKET %s opened (x-request-id %s)", path, rid)
        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("WEBSOCKET %s failed (x-request-id %s)", path, rid)
        if self.log_requests:
            log.info("WEBSOCKET %s closed (x-request-id %s)", path, rid)


async def _answer(err: APIError, scope: Scope, receive: Receive, send: Send) -> None:
    scope["state"][ERROR_MESSAGE_KEY] = err.message
    await JSONResponse(error_body(err, scope.get("path", "")), status_code=err.status,
                       headers=err.headers())(scope, receive, send)
