"""The base of every request schema: unknown fields accepted and ignored (clients send many), values typed strictly."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from hinfer.server.errors import bad_request


class OpenModel(BaseModel):
    # strict: "5" is not an integer nor "yes" a boolean, as the APIs answer (400) too; NaN / Infinity are valid to
    # Python's json module but never valid settings.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)


def type_of(obj: dict[str, Any], param: str) -> str | None:
    """A raw JSON object's `type` (items, parts and tools the schemas keep untyped): a string, or None when absent;
    anything else is the client's error, so a lookup by type never meets an unhashable value."""
    typ = obj.get("type")
    if typ is not None and not isinstance(typ, str):
        raise bad_request("'type' must be a string", param=f"{param}.type")
    return typ
