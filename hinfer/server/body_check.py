"""Request bodies must be JSON text the server can use and write back.

Python's json module reads two things no other JSON parser passes on: a lone UTF-16 surrogate (`"\\ud800"`) parses
into a str that can be neither tokenized nor written back as UTF-8, and the bare words NaN / Infinity parse into
floats that no response can echo (JSON has no such numbers). Every request model checks its raw body first, so such
input is a 400 naming the field in the dialect's shape, instead of a failure deep in the tokenizer or the response
encoder (a stored `metadata` value, a tool's schema, echoed into a streamed event).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, model_validator

from hinfer.server.errors import bad_request


def _bad(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    return isinstance(value, float) and not math.isfinite(value)


def _find(obj: Any, path: list[str]) -> tuple[list[str], Any] | None:
    """(path, value) of the first string (key or value) not encodable as UTF-8 or non-finite number."""
    if _bad(obj):
        return path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _find(k, path) or _find(v, [*path, str(k)])
            if found:
                return found
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found = _find(v, [*path, str(i)])
            if found:
                return found
    return None


def check_body(data: Any) -> None:
    try:  # one pass in C for the common case; the walk only runs to name the field
        json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8")
        return
    except (UnicodeEncodeError, ValueError):  # ValueError: NaN or Infinity
        pass
    except TypeError:  # not JSON data: the schema reports it
        return
    found = _find(data, [])
    if found is None:
        return
    path, value = found
    param = ".".join(path) or None
    where = param or "the request body"
    if isinstance(value, float):
        raise bad_request(f"invalid number in {where}: {value} is not a JSON number (JSON has no NaN or Infinity); "
                          "send a finite number", param=param)  # fmt: skip
    bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
    raise bad_request(f"invalid Unicode in {where}: a lone surrogate (\\u{ord(bad):04x}) is not a character; send "
                      "valid UTF-8 text", param=param)  # fmt: skip


class CheckedBody(BaseModel):
    """Base of the top-level request models: the whole raw body is checked before any field."""

    @model_validator(mode="before")
    @classmethod
    def _usable_json(cls, data: Any) -> Any:
        check_body(data)
        return data
