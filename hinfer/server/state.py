"""What every route needs: the engine, the tokenizer, the served names, metrics. One per app."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request

from hinfer.server.anthropic_batches import MessageBatches
from hinfer.server.conversations_store import ConversationStore
from hinfer.server.drain import Drain
from hinfer.server.errors import bad_request
from hinfer.server.files_store import FileStore
from hinfer.server.metrics import Metrics
from hinfer.server.openai_batches import Batches
from hinfer.server.prompt_guard import PromptGuard
from hinfer.server.responses_background import BackgroundResponses
from hinfer.server.responses_store import ResponseStore

if TYPE_CHECKING:
    from hinfer.engine.protocol import AsyncEngine
    from hinfer.tokenizer import Tokenizer


@dataclass
class ServerState:
    engine: AsyncEngine
    tokenizer: Tokenizer
    model_name: str
    model_aliases: tuple[str, ...] = ()
    preserve_thinking_default: bool = False
    metrics: Metrics = field(default_factory=Metrics)
    responses: ResponseStore = field(default_factory=ResponseStore)  # stored Responses API answers
    background: BackgroundResponses = field(default_factory=BackgroundResponses)  # their running generations
    message_batches: MessageBatches = field(default_factory=MessageBatches)  # Anthropic Message Batches
    files: FileStore = field(default_factory=FileStore)  # OpenAI Files: batches' inputs and outputs
    batches: Batches = field(default_factory=Batches)  # OpenAI Batches
    conversations: ConversationStore = field(default_factory=ConversationStore)  # the Conversations API's
    created: int = field(default_factory=lambda: int(time.time()))
    drain: Drain = field(default_factory=Drain)  # graceful shutdown (drain.py)
    # True: special-token text inside client strings becomes control tokens (--allow-special-tokens-in-content)
    allow_special_tokens: bool = False
    # True: tool_choice auto answers are held to valid tool calls by a grammar (--tool-call-grammar)
    tool_call_grammar: bool = False
    compaction_max_tokens: int = 4096  # a compaction summary's budget when the request sets none
    _token_text: dict[int, str] = field(default_factory=dict)
    _guard: PromptGuard | None = None

    @property
    def prompt_guard(self) -> PromptGuard | None:
        """What render_prompt encodes client strings through; None when special tokens are allowed in them."""
        if self.allow_special_tokens:
            return None
        if self._guard is None:
            self._guard = PromptGuard(self.tokenizer)
        return self._guard

    def check_model(self, model: str) -> None:
        if model != self.model_name and model not in self.model_aliases:
            names = ", ".join(repr(n) for n in (self.model_name, *self.model_aliases))
            raise bad_request(f"model {model!r} is not served here; this server serves {names}",
                              param="model", code="model_not_found")

    def token_text(self, token_id: int) -> str:
        """One token's text (for logprobs). Cached: the same few thousand tokens recur."""
        text = self._token_text.get(token_id)
        if text is None:
            try:
                text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            except Exception:  # an id the tokenizer cannot decode still gets a name
                text = f"<|token_{token_id}|>"
            if len(self._token_text) > 65536:
                self._token_text.clear()
            self._token_text[token_id] = text
        return text

    def token_bytes(self, token_id: int) -> list[int]:
        """The token's raw bytes (a multi-byte character split across tokens stays exact)."""
        fn = getattr(self.tokenizer, "token_bytes", None)
        raw = fn(token_id) if fn is not None else self.token_text(token_id).encode()
        return list(raw)


def get_state(request: Request) -> ServerState:
    return request.app.state.hinfer
