"""OpenAI Responses API request schema. Unknown fields are accepted and ignored; `input` items and `tools` are
checked one by one in responses_convert.py so that each gets a precise message (see docs/api.md)."""

from __future__ import annotations

from typing import Any, Literal

from hinfer.server.body_check import CheckedBody
from hinfer.server.schema_base import OpenModel


class ReasoningConfig(OpenModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None  # accepted; the raw reasoning is returned instead of a summary


class InputTokensRequest(OpenModel, CheckedBody):
    """What renders a Responses prompt; alone, POST /v1/responses/input_tokens (no model required)."""

    model: str | None = None
    input: str | list[Any] = ""  # items are checked one by one in responses_convert.py
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None  # a Conversations API id, or {"id": ...}
    reasoning: ReasoningConfig | None = None
    text: dict[str, Any] | None = None


class ResponsesRequest(InputTokensRequest):
    model: str
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool = True  # OpenAI's default
    include: list[str] | None = None
    background: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    context_management: list[dict[str, Any]] | None = None  # entries checked in responses_compact.py


class CompactRequest(ResponsesRequest):
    """POST /v1/responses/compact: the conversation (`input`, `previous_response_id` or `conversation`) and
    `instructions` to summarize; the Responses fields Codex CLI sends along are taken as a create request takes
    them (tools are checked but not shown: the summary calls none); `stream` and `background` are a 400."""
