"""Anthropic Messages request schemas. Unknown fields are accepted and ignored; content blocks are checked
one by one in anthropic_convert.py so that an unsupported block gets a precise message."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hinfer.server.body_check import CheckedBody
from hinfer.server.schema_base import OpenModel


class Message(OpenModel):
    role: Literal["user", "assistant", "system"]  # system: Anthropic's mid-conversation system messages
    content: str | list[dict[str, Any]]


class Tool(OpenModel):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None  # "custom" or absent; server tools (web_search_..., bash_...) are refused, tool search
    # tools (tool_search_tool_...) left out (anthropic_convert.TOOL_SEARCH_PREFIX)
    defer_loading: bool | None = None  # true: callable, but shown only where a tool_reference loads it


class ToolChoice(OpenModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(OpenModel):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class _MessagesBase(OpenModel, CheckedBody):
    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    context_management: dict[str, Any] | None = None  # edits applied before rendering (anthropic_context.py)


class MessagesRequest(_MessagesBase):
    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None  # `format`: structured output (server/structured.py)


class CountTokensRequest(_MessagesBase):
    pass


# Content blocks (validated individually).


class TextBlock(OpenModel):
    type: Literal["text"]
    text: str


class ToolUseBlock(OpenModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(OpenModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class ThinkingBlock(OpenModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(OpenModel):
    type: Literal["redacted_thinking"]
    data: str | None = None


class ServerToolBlock(OpenModel):
    """A call of a tool that ran at Anthropic (`server_tool_use`, `mcp_tool_use`) or its result
    (`web_search_tool_result`, `tool_search_tool_result`, `mcp_tool_result`, ...): in an assistant message of a
    conversation begun there."""

    type: str


def is_server_tool_block(typ: str) -> bool:
    return typ in ("server_tool_use", "mcp_tool_use", "mcp_tool_result") or (
        typ.endswith("_tool_result") and typ != "tool_result")


BLOCK_TYPES: dict[str, type[OpenModel]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
}


class MessageBatchRequest(OpenModel):
    custom_id: str  # 1-64 letters, digits, '_' or '-', distinct in the batch (anthropic_batches.parse_requests)
    params: dict[str, Any]  # a /v1/messages body, checked when the request runs (its errors are its result)


class MessageBatchCreateRequest(OpenModel, CheckedBody):
    requests: list[MessageBatchRequest]
