"""Per-request plumbing as plain ASGI (BaseHTTPMiddleware would buffer streams and hide disconnects):
request id in and out, API key check, request counting for /metrics."""

from __future__ import annotations

import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hinfer.server.auth import OPEN_PATHS, authorized
from hinfer.server.errors import APIError, error_body
from hinfer.server.metrics import Metrics

_GOOD_ID = re.compile(r"^[\w\-.:/=+@]{1,128}$")  # echo only ids that are safe in a header and a log line
_COUNTED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens",
            "/v1/models", "/health", "/metrics")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, api_key: str | None, metrics: Metrics):
        self.app = app
        self.api_key = api_key
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        rid = given if given and _GOOD_ID.match(given) else f"req-{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = rid
        path: str = scope.get("path", "")
        endpoint = next((p for p in _COUNTED if path == p or path.startswith(p + "/")), "other")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("x-request-id", rid)
                self.metrics.request_done(endpoint, message["status"])
            await send(message)

        if self.api_key and path not in OPEN_PATHS and scope.get("method") != "OPTIONS" \
                and not authorized(headers, self.api_key):
            err = APIError(401, "invalid or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                           code="invalid_api_key", anthropic_message="invalid x-api-key")
            await JSONResponse(error_body(err, path), status_code=401)(scope, receive, send_with_id)
            return
        await self.app(scope, receive, send_with_id)
