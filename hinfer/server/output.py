"""Generated text -> typed pieces: reasoning, answer text, tool calls.

Both dialects and both modes (streaming or not) go through this one pipeline, so a non-streaming answer is
exactly the concatenation of what the stream would have sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hinfer.server.reasoning import REASONING, ReasoningSplitter
from hinfer.server.tool_parser import (
    ParsedCall,
    TextPiece,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallParser,
    ToolCallStart,
)


@dataclass
class ReasoningPiece:
    text: str


Piece = ReasoningPiece | TextPiece | ToolCallStart | ToolCallArgs | ToolCallEnd


class OutputParser:
    """`reasoning`: generation starts inside `<think>`. `tools`: {name: parameters schema}, or None to
    leave tool-call text alone (tool_choice none, or no tools)."""

    def __init__(self, *, reasoning: bool, tools: dict[str, dict[str, Any]] | None, new_id: Callable[[], str]):
        self._splitter = ReasoningSplitter(start_in_reasoning=reasoning)
        self._tools = ToolCallParser(tools, new_id) if tools else None

    @property
    def in_reasoning(self) -> bool:
        return self._splitter.in_reasoning

    @property
    def calls(self) -> list[ParsedCall]:
        return self._tools.calls if self._tools else []

    def feed(self, text: str) -> list[Piece]:
        return self._route(self._splitter.feed(text), final=False)

    def flush(self) -> list[Piece]:
        return self._route(self._splitter.flush(), final=True)

    def _route(self, parts: list[tuple[str, str]], final: bool) -> list[Piece]:
        out: list[Piece] = []
        for kind, text in parts:
            if kind == REASONING:
                out.append(ReasoningPiece(text))
            elif self._tools is None:
                out.append(TextPiece(text))
            else:
                out.extend(self._tools.feed(text))
        if final and self._tools is not None:
            out.extend(self._tools.flush())
        return out
