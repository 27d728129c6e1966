"""The base of every request schema: unknown fields accepted and ignored (clients send many), values typed strictly."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class OpenModel(BaseModel):
    # strict: "5" is not an integer nor "yes" a boolean, as the APIs answer (400) too; NaN / Infinity are valid to
    # Python's json module but never valid settings.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)
