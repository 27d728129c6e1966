"""What the OpenAPI document says the routes answer besides their 200: errors in each dialect's shape (400 for a
request the schema or the server rejects, never FastAPI's 422) and event streams. Generated clients and
schemathesis read these declarations."""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}
_STR_OR_NULL = {"anyOf": [_STR, {"type": "null"}]}
OPENAI_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "param", "code"],
                             "properties": {"message": _STR, "type": _STR, "param": _STR_OR_NULL,
                                            "code": _STR_OR_NULL}}}}
ANTHROPIC_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["type", "error"],
    "properties": {"type": {"const": "error"},
                   "error": {"type": "object", "required": ["type", "message"],
                             "properties": {"type": _STR, "message": _STR}}}}


def _errors(schema: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    # Inline JSON content, not a `model`: FastAPI would give a model the route's media type (text/plain on
    # /metrics). Ranges: a 4XX entry also keeps FastAPI from documenting a 422 that the server never sends.
    content = {"application/json": {"schema": schema}}
    return {"4XX": {"description": "the request was refused (docs/api.md, Errors)", "content": content},
            "5XX": {"description": "the server is shutting down, full, or failed", "content": content}}


OPENAI_ERRORS = _errors(OPENAI_ERROR_SCHEMA)
ANTHROPIC_ERRORS = _errors(ANTHROPIC_ERROR_SCHEMA)
# `stream: true` answers with server-sent events instead of one JSON object.
STREAMED: dict[int | str, dict[str, Any]] = {
    200: {"description": "a JSON object, or server-sent events with `stream: true`",
          "content": {"application/json": {}, "text/event-stream": {}}}}
