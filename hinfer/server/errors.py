"""API errors and their two wire shapes.

Routes raise `APIError`; the app's exception handlers render it in the dialect of the path
(`/v1/messages*` is Anthropic, everything else OpenAI), so one error type serves both APIs.
"""

from __future__ import annotations

from typing import Any

ERROR_LOGGED_KEY = "error_logged"  # scope["state"] flag: this request's failure is already in the log

# HTTP status -> (OpenAI `type`, Anthropic `type`)
_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "invalid_request_error"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("server_error", "api_error"),
    503: ("server_error", "overloaded_error"),
}


class APIError(Exception):
    """An error answered to the client; `message` is shown to the user as is."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 anthropic_message: str | None = None, retry_after: int = 1, close: bool = False):
        super().__init__(message)
        self.retry_after = retry_after  # seconds, sent with 429 and 503 (both SDKs wait that long to retry)
        self.close = close  # ask the client to reconnect (e.g. to another instance while this one drains)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        # Anthropic clients match some messages by their text (Claude Code: "prompt is too long"): the same
        # error can carry Anthropic's wording for Anthropic paths.
        self.anthropic_message = anthropic_message

    def headers(self) -> dict[str, str] | None:
        out: dict[str, str] = {}
        if self.status in (429, 503):
            out["retry-after"] = str(self.retry_after)
        if self.close:
            out["connection"] = "close"
        return out or None


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def openai_body(err: APIError) -> dict[str, Any]:
    typ = _TYPES.get(err.status, _TYPES[500])[0]
    return {"error": {"message": err.message, "type": typ, "param": err.param, "code": err.code}}


def anthropic_body(err: APIError) -> dict[str, Any]:
    typ = _TYPES.get(err.status, _TYPES[500])[1]
    return {"type": "error", "error": {"type": typ, "message": err.anthropic_message or err.message}}


def error_body(err: APIError, path: str) -> dict[str, Any]:
    return anthropic_body(err) if is_anthropic_path(path) else openai_body(err)


def describe_validation_errors(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """Pydantic/FastAPI validation errors -> one readable line and the first offending field path."""
    parts = []
    first_param = None
    for e in errors[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        path = ".".join(loc) if loc else "body"
        if first_param is None and loc:
            first_param = path
        parts.append(f"{path}: {e.get('msg', 'invalid value')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more or "invalid request", first_param
