"""OpenAI request schemas. Unknown fields are accepted and ignored (clients send many); the fields we
cannot honour are rejected in openai_convert.py with a message, see docs/api.md."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hinfer.server.body_check import CheckedBody
from hinfer.server.schema_base import OpenModel


class FunctionCall(OpenModel):
    name: str
    arguments: str | dict[str, Any] = "{}"  # a JSON object as text (OpenAI); a dict is accepted too


class CustomCall(OpenModel):
    name: str
    input: str


class ToolCall(OpenModel):
    id: str | None = None
    type: Literal["function", "custom"] = "function"
    function: FunctionCall | None = None  # type function
    custom: CustomCall | None = None  # type custom: a freeform tool's call, its input the text


class ChatMessage(OpenModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the name some clients use for reasoning_content
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(OpenModel):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class CustomDef(OpenModel):
    name: str = Field(min_length=1)
    description: str | None = None
    format: dict[str, Any] | None = None  # {"type": "text"} or {"type": "grammar", "grammar": {"syntax", "definition"}}


class Tool(OpenModel):
    type: Literal["function", "custom"] = "function"
    function: FunctionDef | None = None  # type function
    custom: CustomDef | None = None  # type custom: a freeform tool (openai_convert.py)


class NamedFunction(OpenModel):
    name: str


class NamedToolChoice(OpenModel):
    type: Literal["function", "custom"] = "function"
    function: NamedFunction | None = None
    custom: NamedFunction | None = None


class AllowedTools(OpenModel):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]  # {"type": "function", "function": {"name"}}: checked in openai_convert.py


class AllowedToolsChoice(OpenModel):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class StreamOptions(OpenModel):
    include_usage: bool = False


class _SamplingFields(OpenModel, CheckedBody):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # extension (vLLM-style)
    min_p: float | None = None  # extension
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None  # extension
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # extension
    ignore_eos: bool = False  # extension
    logit_bias: dict[str, float] | None = None
    n: int | None = None
    user: str | None = None


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    prompt_logprobs: int | None = None  # extension (vLLM's): each prompt token's logprob, rank and this many others
    response_format: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # extension: enable_thinking, preserve_thinking, ...
    skip_special_tokens: bool = True  # extension
    continue_final_message: bool = False  # extension (vLLM's): the answer goes on from the final assistant message
    add_generation_prompt: bool = True  # extension (vLLM's): false only with continue_final_message


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16  # the OpenAI default for legacy completions
    logprobs: int | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None
    skip_special_tokens: bool = True


class BatchCreateRequest(OpenModel, CheckedBody):
    input_file_id: str
    endpoint: str  # /v1/chat/completions, /v1/completions or /v1/responses (openai_batches.ENDPOINTS)
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
