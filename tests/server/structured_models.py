"""Pydantic models for the client libraries' structured-output helpers on the demo model.

Every field is bounded (enums, booleans) so the grammar ends the random model's answer within a few tokens, and
nothing relies on constraints that a client strips from the schema before sending it (the Anthropic SDK's
`transform_schema` moves `maxLength`, `minimum`, ... into descriptions)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ChoiceWeather(BaseModel):
    """A weather report."""

    city: Literal["Paris", "Rome", "Oslo"]
    days: Literal[1, 2, 3]
    sunny: bool
