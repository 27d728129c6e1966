"""System messages after the first one, rendered as ChatML system turns where they stand.

The Qwen3.5 chat template only takes a system message at the start, but agents send them later too (Anthropic's
mid-conversation system messages, Responses `developer` items). The template is given a placeholder user turn in
their place, shaped as a tool response so that the template does not take it for the user's latest query (which
decides whose reasoning is kept); in the rendered text that placeholder turn is then swapped for the system turn.
"""

from __future__ import annotations

import secrets
from typing import Any


def hide_late_system(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """-> (messages the template accepts, {placeholder turn text: system turn text})."""
    out: list[dict[str, Any]] = []
    swaps: dict[str, str] = {}
    for i, m in enumerate(messages):
        if i == 0 or m.get("role") != "system":
            out.append(m)
            continue
        turn, swap = late_system_turn(str(m.get("content") or ""))
        out.append(turn)
        swaps |= swap
    return out, swaps


def late_system_turn(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A system turn to render anywhere after the first message: (its placeholder message, its swap)."""
    marker = f"<tool_response>hinfer-system-{secrets.token_hex(8)}</tool_response>"
    swap = {f"<|im_start|>user\n{marker}<|im_end|>\n": f"<|im_start|>system\n{text.strip()}<|im_end|>\n"}
    return {"role": "user", "content": marker}, swap


def restore_late_system(text: str, swaps: dict[str, str]) -> str:
    for placeholder, system_turn in swaps.items():
        if placeholder not in text:  # a template that renders turns differently: fail loudly, never leak markers
            raise ValueError("the chat template does not render user turns as ChatML; system messages after the "
                             "first one are not supported with it")
        text = text.replace(placeholder, system_turn)
    return text
