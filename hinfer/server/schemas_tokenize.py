"""Request schemas of vLLM's tokenizer endpoints (POST /tokenize, POST /detokenize), field for field. One tokenize
model holds both of vLLM's shapes (a raw `prompt`, or chat `messages`): tokenize_routes.py picks by which is set."""

from __future__ import annotations

from typing import Any

from hinfer.server.body_check import CheckedBody
from hinfer.server.schema_base import OpenModel
from hinfer.server.schemas_openai import ChatMessage, Tool


class TokenizeRequest(OpenModel, CheckedBody):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    # vLLM's defaults differ by shape: True for a prompt, False for messages (the template writes its own)
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Tool] | None = None


class DetokenizeRequest(OpenModel, CheckedBody):
    model: str | None = None
    tokens: list[int]
