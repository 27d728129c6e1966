"""API key check: `Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic clients)."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

# Liveness must answer without a key (load balancers, `hinfer` health checks).
OPEN_PATHS = frozenset({"/health"})


def presented_key(headers: Headers) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None


def authorized(headers: Headers, api_key: str) -> bool:
    key = presented_key(headers)
    return key is not None and hmac.compare_digest(key.encode(), api_key.encode())
