"""Anthropic's context management on a Messages request, before its prompt is rendered.

- Compaction blocks (`{"type": "compaction", "content": SUMMARY}`, in an assistant message) are replayed as
  Anthropic does: everything before the last one is dropped and its summary stands in for it (a user message
  here); a block whose content is null is a no-op.
- `context_management.edits` (beta `context-management-2025-06-27`), in their order:
  `clear_thinking_20251015` takes the thinking blocks out of all but the last `keep` assistant turns that have
  them; `clear_tool_uses_20250919`, once the prompt passes its `trigger` (input tokens, default 100,000, or tool
  uses), replaces the results of all but the last `keep` tool uses (default 3; `exclude_tools` never) with a
  placeholder, and their inputs too with `clear_tool_inputs`, unless that frees fewer than `clear_at_least` tokens.
  Each edit that cleared something is reported (`applied_edits`, with the input tokens it freed: the prompt
  rendered before and after). `compact_20260112`: once the prompt passes its trigger (default 150,000 input
  tokens) the request is compacted first (anthropic_compact.py); it is not an applied edit in Anthropic's report.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hinfer.server.compaction import SUMMARY_HEAD
from hinfer.server.errors import APIError, bad_request
from hinfer.server.schemas_anthropic import Message

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
CLEARED_RESULT = "[This tool result was cleared to save context.]"
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
DEFAULT_COMPACT_TOKENS = 150_000

Blocks = list[dict[str, Any]]
R = TypeVar("R")  # what a count renders, handed back with the messages it counted


def _bad(param: str, message: str) -> APIError:
    """A 400 whose message names the field (Anthropic's errors carry no param of their own)."""
    return bad_request(f"{param}: {message}", param=param)


def _blocks(m: Message) -> Blocks:
    return [{"type": "text", "text": m.content}] if isinstance(m.content, str) else list(m.content)


def _with(m: Message, blocks: Blocks) -> Message:
    return m.model_copy(update={"content": blocks})


def replay_compaction(messages: list[Message]) -> list[Message]:
    """The conversation from its last compaction block on: the summary (a user message), then the blocks after it."""
    last = None
    for i, m in enumerate(messages):
        for j, b in enumerate(_blocks(m)):
            if b.get("type") == "compaction" and isinstance(b.get("content"), str) and b["content"]:
                last = (i, j)
    out = []
    for i, m in enumerate(messages):
        if last is not None and i < last[0]:
            continue
        blocks = _blocks(m)
        if last is not None and i == last[0]:
            out.append(Message(role="user", content=SUMMARY_HEAD + blocks[last[1]]["content"]))
            blocks = blocks[last[1] + 1:]
            if not blocks:
                continue
        kept = [b for b in blocks if b.get("type") != "compaction"]  # failed (null) compactions: no-ops
        if kept or not isinstance(m.content, list):
            out.append(_with(m, kept) if isinstance(m.content, list) else m)
    return out


def _amount(raw: Any, kinds: tuple[str, ...], default: int | None, param: str) -> tuple[str, int] | None:
    """A `{"type": KIND, "value": N}` setting (or absent: the default's first kind)."""
    if raw is None:
        return (kinds[0], default) if default is not None else None
    if not isinstance(raw, dict) or raw.get("type") not in kinds or type(raw.get("value")) is not int \
            or raw["value"] < 0:  # fmt: skip
        raise _bad(param, f"expected {{'type': one of {list(kinds)}, 'value': a non-negative integer}}")
    return raw["type"], raw["value"]


def parse_edits(raw: Any) -> list[dict[str, Any]]:
    """`context_management` -> its edits, each checked (a 400 naming the field)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("edits", []), list):
        raise _bad("context_management", "expected an object with a list of edits")
    edits = raw.get("edits", [])
    for i, e in enumerate(edits):
        p = f"context_management.edits.{i}"
        if not isinstance(e, dict) or e.get("type") not in (CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT):
            raise _bad(f"{p}.type", f"unknown context edit; expected one of {CLEAR_TOOL_USES!r}, {CLEAR_THINKING!r}, "
                                    f"{COMPACT!r}")
        if e["type"] == CLEAR_TOOL_USES:
            _amount(e.get("trigger"), ("input_tokens", "tool_uses"), DEFAULT_TRIGGER_TOKENS, f"{p}.trigger")
            _amount(e.get("keep"), ("tool_uses",), DEFAULT_KEEP_TOOL_USES, f"{p}.keep")
            _amount(e.get("clear_at_least"), ("input_tokens",), None, f"{p}.clear_at_least")
            ex, ci = e.get("exclude_tools"), e.get("clear_tool_inputs")
            if ex is not None and not _names(ex):
                raise _bad(f"{p}.exclude_tools", "expected a list of tool names")
            if ci is not None and not isinstance(ci, bool) and not _names(ci):
                raise _bad(f"{p}.clear_tool_inputs", "expected a boolean or a list of tool names")
        elif e["type"] == CLEAR_THINKING:
            _thinking_keep(e.get("keep"), f"{p}.keep")
        else:
            _amount(e.get("trigger"), ("input_tokens",), DEFAULT_COMPACT_TOKENS, f"{p}.trigger")
            if not isinstance(e.get("pause_after_compaction", False), bool):
                raise _bad(f"{p}.pause_after_compaction", "expected a boolean")
            if e.get("instructions") is not None and not isinstance(e["instructions"], str):
                raise _bad(f"{p}.instructions", "expected a string")
    return edits


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


def _thinking_keep(raw: Any, param: str) -> int | None:
    """Turns whose thinking stays (None: all)."""
    if raw == "all" or (isinstance(raw, dict) and raw.get("type") == "all"):
        return None
    kept = _amount(raw, ("thinking_turns",), DEFAULT_KEEP_THINKING_TURNS, param)
    return kept[1] if kept is not None else None


def clear_thinking(messages: list[Message], keep: int | None) -> tuple[list[Message], int]:
    """-> (messages, assistant turns whose thinking was taken out)."""
    if keep is None:
        return messages, 0
    turns = [i for i, m in enumerate(messages) if m.role == "assistant" and any(
        b.get("type") in ("thinking", "redacted_thinking") for b in _blocks(m))]
    cleared = set(turns[:-keep] if keep else turns)
    out = [_with(m, [b for b in _blocks(m) if b.get("type") not in ("thinking", "redacted_thinking")])
           if i in cleared else m for i, m in enumerate(messages)]
    return out, len(cleared)


def _tool_uses(messages: list[Message]) -> list[tuple[str, str]]:
    """(id, name) of every tool_use block, in order."""
    return [(b.get("id"), b.get("name")) for m in messages if m.role == "assistant" for b in _blocks(m)
            if b.get("type") == "tool_use"]


def clear_tool_uses(messages: list[Message], keep: int, exclude: list[str], clear_inputs: bool | list[str]
                    ) -> tuple[list[Message], int]:  # fmt: skip
    """-> (messages, tool uses whose result was cleared): all but the last `keep` uses and `exclude`'s tools."""
    uses = _tool_uses(messages)
    old = uses[:-keep] if keep else uses
    names = {i: n for i, n in old if n not in exclude}
    done: set[str] = set()
    out = []
    for m in messages:
        blocks = _blocks(m)
        new: Blocks = []
        for b in blocks:
            if b.get("type") == "tool_result" and b.get("tool_use_id") in names:
                if b.get("content") != CLEARED_RESULT:
                    done.add(b["tool_use_id"])
                b = {**b, "content": CLEARED_RESULT}
            elif b.get("type") == "tool_use" and b.get("id") in names and (
                    clear_inputs is True or (isinstance(clear_inputs, list) and b.get("name") in clear_inputs)):
                b = {**b, "input": {}}
            new.append(b)
        out.append(_with(m, new) if new != blocks else m)
    return out, len(done)


@dataclass
class Managed(Generic[R]):
    """A request's messages after context management; with `context_management` asked for, the prompt's length
    before it, the edits applied and the messages' rendering that was counted."""

    messages: list[Message]
    original_tokens: int | None = None
    applied: list[dict[str, Any]] | None = field(default=None)
    compact: dict[str, Any] | None = None  # the compaction edit the prompt triggered: summarize first
    rendered: R | None = None  # what `count` rendered for `messages` (None: they were not counted)


async def manage(messages: list[Message], raw: Any,
                 count: Callable[[list[Message]], Awaitable[tuple[int, R]]]) -> Managed[R]:  # fmt: skip
    """Compaction blocks replayed, then `raw`'s edits (`context_management`) applied in order; `count` renders
    a message list and hands back its prompt tokens and the rendering, which the result keeps for its messages
    so that they are not rendered again."""
    messages = replay_compaction(messages)
    if raw is None:
        return Managed(messages)
    tokens, rendered = await count(messages)
    managed: Managed[R] = Managed(messages, tokens, [])
    for e in parse_edits(raw):
        if e["type"] == COMPACT:
            _, limit = _amount(e.get("trigger"), ("input_tokens",), DEFAULT_COMPACT_TOKENS, "")
            if tokens > limit and managed.compact is None:
                managed.compact = e
            continue
        if e["type"] == CLEAR_THINKING:
            new, n = clear_thinking(messages, _thinking_keep(e.get("keep"), ""))
            report = {"type": CLEAR_THINKING, "cleared_thinking_turns": n}
        else:
            kind, limit = _amount(e.get("trigger"), ("input_tokens", "tool_uses"), DEFAULT_TRIGGER_TOKENS, "")
            if (tokens if kind == "input_tokens" else len(_tool_uses(messages))) <= limit:
                continue
            _, keep = _amount(e.get("keep"), ("tool_uses",), DEFAULT_KEEP_TOOL_USES, "")
            new, n = clear_tool_uses(messages, keep, list(e.get("exclude_tools") or []),
                                     e.get("clear_tool_inputs") or False)
            report = {"type": CLEAR_TOOL_USES, "cleared_tool_uses": n}
        if n == 0:
            continue
        after, rendered_after = await count(new)
        least = _amount(e.get("clear_at_least"), ("input_tokens",), None, "")
        if least is not None and tokens - after < least[1]:
            continue
        managed.applied.append({**report, "cleared_input_tokens": tokens - after})
        messages, tokens, rendered = new, after, rendered_after
    managed.messages, managed.rendered = messages, rendered
    return managed
