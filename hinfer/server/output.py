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
    leave tool-call text alone (tool_choice none, or no tools). `max_calls`: calls after that many are
    dropped (parallel tool calls turned off), so the client never sees more than it asked for. `trim_strings`:
    the calls are grammar-forced (ToolCallParser)."""

    def __init__(self, *, reasoning: bool, tools: dict[str, dict[str, Any]] | None, new_id: Callable[[], str],
                 max_calls: int | None = None, trim_strings: bool = False):
        self._splitter = ReasoningSplitter(start_in_reasoning=reasoning)
        self._tools = ToolCallParser(tools, new_id, trim_strings) if tools else None
        self._max_calls = max_calls

    @property
    def in_reasoning(self) -> bool:
        return self._splitter.in_reasoning

    @property
    def calls(self) -> list[ParsedCall]:
        calls = self._tools.calls if self._tools else []
        return calls if self._max_calls is None else calls[: self._max_calls]

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
        if self._max_calls is not None:
            out = [p for p in out if not (isinstance(p, (ToolCallStart, ToolCallArgs, ToolCallEnd))
                                          and p.index >= self._max_calls)]
        return out
