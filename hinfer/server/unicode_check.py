"""Request bodies must hold valid Unicode text.

JSON may spell a lone UTF-16 surrogate (`"\\ud800"`); Python parses it into a str that can be neither tokenized
nor written back as UTF-8. Every request model checks its raw body first, so such input is a 400 naming the
field in the dialect's shape, instead of a failure deep in the tokenizer or the response encoder.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, model_validator

from hinfer.server.errors import bad_request


def _find(obj: Any, path: list[str]) -> tuple[list[str], str] | None:
    """(path, bad string) of the first string (key or value) that is not encodable as UTF-8."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return path, obj
        return None
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


def check_unicode(data: Any) -> None:
    try:  # one pass in C for the common case; the walk only runs to name the field
        json.dumps(data, ensure_ascii=False).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    except (TypeError, ValueError):  # not JSON data (NaN, objects): the schema reports those
        pass
    found = _find(data, [])
    if found is None:
        return
    path, text = found
    bad = next(c for c in text if 0xD800 <= ord(c) <= 0xDFFF)
    param = ".".join(path) or None
    raise bad_request(f"invalid Unicode in {param or 'the request body'}: a lone surrogate (\\u{ord(bad):04x}) is "
                      "not a character; send valid UTF-8 text", param=param)


class UnicodeChecked(BaseModel):
    """Base of the top-level request models: the whole raw body is checked before any field."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        check_unicode(data)
        return data
