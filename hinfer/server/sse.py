"""Server-sent events framing (no dependency: the format is three lines)."""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]\n\n"


def _dumps(obj: Any) -> str:
    # Compact and ASCII-safe only where needed: clients read UTF-8. allow_nan=False: a bare NaN is not JSON,
    # so a non-finite number raises here (the stream then ends with its error event) instead of going out.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def data(obj: Any) -> bytes:
    """An unnamed event (OpenAI style)."""
    return f"data: {_dumps(obj)}\n\n".encode()


def event(name: str, obj: Any) -> bytes:
    """A named event (Anthropic style: the `type` of the payload repeated as the event name)."""
    return f"event: {name}\ndata: {_dumps(obj)}\n\n".encode()


STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
