"""create_app: the FastAPI application over an AsyncEngine and a Tokenizer."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hinfer.server import (
    anthropic_batch_routes,
    anthropic_routes,
    conversations_routes,
    misc_routes,
    openai_batch_routes,
    openai_routes,
    responses_routes,
    responses_socket,
    tokenize_routes,
    webui_routes,
)
from hinfer.server.auth import OPEN_PATHS
from hinfer.server.errors import APIError, describe_validation_errors, error_body
from hinfer.server.metrics import Metrics
from hinfer.server.middleware import ERROR_MESSAGE_KEY, RequestContextMiddleware
from hinfer.server.state import ServerState

if TYPE_CHECKING:
    from hinfer.engine.protocol import AsyncEngine
    from hinfer.tokenizer import Tokenizer

log = logging.getLogger(__name__)

_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
_NOT_AN_OBJECT = {"dict_type", "model_attributes_type", "model_type", "missing"}


def create_app(
    engine: AsyncEngine,
    tokenizer: Tokenizer,
    *,
    model_name: str,
    api_key: str | None = None,
    cors: list[str] | None = None,
    preserve_thinking_default: bool = False,
    model_aliases: tuple[str, ...] | list[str] = (),
    allow_special_tokens: bool = False,
    tool_call_grammar: bool = False,
    compaction_max_tokens: int = 4096,
    max_body_bytes: int | None = None,
    log_requests: bool = False,
    webui: bool = True,
) -> FastAPI:
    """The app starts the engine on startup and stops it on shutdown (ASGI lifespan).

    model_aliases: further names requests may use for the model (e.g. what an agent is configured to ask for).
    allow_special_tokens: special-token text in client strings becomes control tokens (see prompt_guard.py).
    tool_call_grammar: with tool_choice auto, every tool call the model starts is held to a valid call.
    compaction_max_tokens: the budget of a compaction summary when the request sets none (compaction.py).
    max_body_bytes: larger request bodies are answered 413 (None: no limit).
    log_requests: log one line per request with its status (errors are always logged).
    webui: serve the web chat at / (docs/webui.md); its files need no key.
    """
    state = ServerState(engine=engine, tokenizer=tokenizer, model_name=model_name,
                        model_aliases=tuple(a for a in model_aliases if a != model_name),
                        preserve_thinking_default=preserve_thinking_default, metrics=Metrics(),
                        allow_special_tokens=allow_special_tokens, tool_call_grammar=tool_call_grammar,
                        compaction_max_tokens=compaction_max_tokens)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        _ = state.prompt_guard  # its tokenizer is built now (0.8 s holding the GIL), not under the first chat request
        await engine.start()
        try:
            yield
        finally:
            await state.message_batches.stop()  # running batches end, what they had not answered canceled
            await state.batches.stop()
            await engine.stop()

    app = FastAPI(title="hinfer", version="0.1.0", lifespan=lifespan,
                  description="OpenAI (Chat Completions, Responses) and Anthropic-compatible API over the hinfer engine; see docs/api.md")
    app.state.hinfer = state
    app.include_router(openai_routes.router)
    app.include_router(responses_routes.router)
    app.include_router(responses_socket.router)
    app.include_router(conversations_routes.router)
    app.include_router(anthropic_routes.router)
    app.include_router(anthropic_batch_routes.router)
    app.include_router(openai_batch_routes.router)
    app.include_router(misc_routes.router)
    app.include_router(tokenize_routes.router)
    if webui:
        app.include_router(webui_routes.router)
    _install_error_handlers(app)
    # Order: the last added runs first; CORS must answer preflights before the key check.
    app.add_middleware(RequestContextMiddleware, api_key=api_key, metrics=state.metrics, drain=state.drain,
                       max_body_bytes=max_body_bytes, log_requests=log_requests,
                       open_paths=OPEN_PATHS | webui_routes.WEBUI_PATHS if webui else OPEN_PATHS)
    if cors:
        app.add_middleware(CORSMiddleware, allow_origins=cors, allow_methods=["*"], allow_headers=["*"],
                           expose_headers=["x-request-id"])
    return app


def _install_error_handlers(app: FastAPI) -> None:
    def reply(request: Request, err: APIError, headers: Mapping[str, str] | None = None) -> JSONResponse:
        # Both SDKs (and the agents built on them) wait `retry-after` seconds before retrying a 429 or 503.
        request.scope.setdefault("state", {})[ERROR_MESSAGE_KEY] = err.message  # for the middleware's log line
        return JSONResponse(error_body(err, request.url.path), status_code=err.status,
                            headers={**(err.headers() or {}), **(headers or {})})

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return reply(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return reply(request, APIError(400, "the request body is not valid JSON", code="invalid_json"))
        if any(tuple(e.get("loc", ())) == ("body",) and e.get("type") in _NOT_AN_OBJECT for e in errors):
            return reply(request, APIError(400, "the request body must be a JSON object "
                                                "(sent with Content-Type: application/json)", code="invalid_json"))
        msg, param = describe_validation_errors(errors)
        return reply(request, APIError(400, msg, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: list every method of the path (Starlette names one route's)
            headers["Allow"] = _allowed_methods(request)
        return reply(request, APIError(exc.status_code, str(exc.detail)), headers)
    # Unexpected exceptions are answered (500, JSON, logged once) by RequestContextMiddleware.


def _allowed_methods(request: Request) -> str:
    # Asks the router (route objects differ between FastAPI versions) which methods it would serve here.
    allowed = [method for method in _METHODS
               if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                      for route in request.app.router.routes)]
    return ", ".join(allowed)
