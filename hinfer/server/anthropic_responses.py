"""Engine events -> Anthropic Messages stream events, and the same events folded into one Message.

Content blocks are opened and closed as the pieces change kind (thinking -> text -> tool_use ...), with
indices counting up from 0: exactly the sequence Anthropic's API streams. The non-streaming answer folds
those events, so both modes agree.
"""

from __future__ import annotations

import json
from typing import Any

from hinfer.engine.protocol import TokenEvent
from hinfer.server.generation import EngineRun
from hinfer.server.ids import new_id
from hinfer.server.output import OutputParser, Piece, ReasoningPiece
from hinfer.server.spec_usage import spec_usage
from hinfer.server.tool_parser import TextPiece, ToolCallArgs, ToolCallStart

# Thinking blocks carry a signature that Anthropic checks when they come back; ours is not checked.
THINKING_SIGNATURE = "hinfer-unsigned"


class MessageBuilder:
    def __init__(self, run: EngineRun, *, model: str, reasoning: bool, tools: dict[str, dict[str, Any]] | None,
                 stop_sequences: list[str], max_calls: int | None = None, trim_strings: bool = False):
        self.run = run
        self.id = new_id("msg_")
        self.model = model
        self.parser = OutputParser(reasoning=reasoning, tools=tools, new_id=lambda: new_id("toolu_"),
                                   max_calls=max_calls, trim_strings=trim_strings)
        self.stop_sequences = stop_sequences
        self.context_management: dict[str, Any] | None = None  # {"applied_edits": ...} when the request asked
        self.lead: list[dict[str, Any]] = []  # events of blocks before the generated ones (a compaction block)
        self.iterations: list[dict[str, Any]] | None = None  # usage of the iterations before this one (compaction)
        self._open: str | None = None  # type of the open block
        self._index = -1

    def start_events(self) -> list[dict[str, Any]]:
        self._index = sum(e["type"] == "content_block_start" for e in self.lead) - 1
        return [{"type": "message_start", "message": self._message([], None, None, output_tokens=0)},
                {"type": "ping"}, *self.lead]

    def feed(self, ev: TokenEvent) -> list[dict[str, Any]]:
        return self._events(self.parser.feed(ev.text))

    def finish_events(self) -> list[dict[str, Any]]:
        out = self._events(self.parser.flush())
        self._close(out)
        stop_reason, stop_sequence = self.stop_reason()
        delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                 "usage": self.final_usage(), "timings": self.run.timings()}
        if self.context_management is not None:
            delta["context_management"] = self.context_management
        out.append(delta)
        out.append({"type": "message_stop"})
        return out

    def final_usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = run_usage(self.run) | spec_usage([self.run])
        if self.iterations is not None:
            usage["iterations"] = [*self.iterations, {"type": "message", **run_usage(self.run)}]
        return usage

    def stop_reason(self) -> tuple[str, str | None]:
        final = self.run.final
        reason = final.finish_reason if final is not None else "stop"
        if reason == "length":
            return "max_tokens", None
        if self.parser.calls:
            return "tool_use", None
        if final is not None and isinstance(final.stop_reason, str) and final.stop_reason in self.stop_sequences:
            return "stop_sequence", final.stop_reason
        return "end_turn", None

    def _events(self, pieces: list[Piece]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for p in pieces:
            if isinstance(p, ReasoningPiece):
                self._ensure(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
                out.append(self._delta({"type": "thinking_delta", "thinking": p.text}))
            elif isinstance(p, TextPiece):
                self._ensure(out, "text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": p.text}))
            elif isinstance(p, ToolCallStart):
                self._close(out)
                self._open_block(out, "tool_use", {"type": "tool_use", "id": p.id, "name": p.name, "input": {}})
            elif isinstance(p, ToolCallArgs):
                out.append(self._delta({"type": "input_json_delta", "partial_json": p.delta}))
            else:  # ToolCallEnd
                self._close(out)
        return out

    def _ensure(self, out: list[dict[str, Any]], kind: str, block: dict[str, Any]) -> None:
        if self._open != kind:
            self._close(out)
            self._open_block(out, kind, block)

    def _open_block(self, out: list[dict[str, Any]], kind: str, block: dict[str, Any]) -> None:
        self._index += 1
        self._open = kind
        out.append({"type": "content_block_start", "index": self._index, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

    def _close(self, out: list[dict[str, Any]]) -> None:
        if self._open is None:
            return
        if self._open == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": THINKING_SIGNATURE}))
        out.append({"type": "content_block_stop", "index": self._index})
        self._open = None

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None, stop_sequence: str | None,
                 output_tokens: int) -> dict[str, Any]:
        # the cache reads are known at message_start: the run starts on its first event
        return message_object(self.id, self.model, content, stop_reason, stop_sequence,
                              run_usage(self.run, output_tokens))  # fmt: skip


def run_usage(run: EngineRun, output_tokens: int | None = None) -> dict[str, int]:
    """A run's usage as Anthropic counts it: the prompt's cache reads apart, `input_tokens` the part computed; no
    cache write is billed apart (0)."""
    cached = run.cached_tokens
    return {"input_tokens": run.prompt_tokens - cached,
            "output_tokens": run.output_tokens if output_tokens is None else output_tokens,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def message_object(msg_id: str, model: str, content: list[dict[str, Any]], stop_reason: str | None,
                   stop_sequence: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    """A Message object as message_start carries it (and fold completes)."""
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}


def fold(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Stream events -> the non-streaming Message."""
    blocks: list[dict[str, Any]] = []
    json_text: dict[int, str] = {}
    msg: dict[str, Any] = {}
    for e in events:
        t = e["type"]
        if t == "message_start":
            msg = dict(e["message"])
        elif t == "content_block_start":
            blocks.append(dict(e["content_block"]))
        elif t == "content_block_delta":
            b, d = blocks[e["index"]], e["delta"]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "compaction_delta":
                b["content"] = d["content"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                json_text[e["index"]] = json_text.get(e["index"], "") + d["partial_json"]
        elif t == "message_delta":
            msg.update(e["delta"])
            msg["usage"] = dict(e["usage"])
            msg["timings"] = e["timings"]
            if "context_management" in e:
                msg["context_management"] = e["context_management"]
    for i, text in json_text.items():
        blocks[i]["input"] = json.loads(text)  # our own fragments: always a complete object
    msg["content"] = blocks
    return msg
