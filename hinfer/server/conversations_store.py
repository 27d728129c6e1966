"""The Conversations API's conversations: ordered input items (messages, calls, their outputs, reasoning) that a
Responses request with `conversation` continues and then extends with its input and output.

In memory and bounded like the stored responses (least recently used goes first; responses_store.py): a restart
forgets them. Every item holds an `id` (the client's, or one made up by its type) and a message's text shorthand
is spelled out as content parts, as OpenAI lists items.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from hinfer.server.errors import bad_request
from hinfer.server.ids import new_id
from hinfer.server.responses_store import size_of

_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
              "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_", "tool_search_call": "tsc_",
              "tool_search_output": "tso_"}  # fmt: skip


def listed_item(item: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    """An input item as OpenAI lists it: with an id (its own; else `item_id`, else one made up by its type), a type,
    and a message's text content as parts (the shorthand {"role", "content": "text"} spelled out)."""
    out = {k: v for k, v in item.items() if k != "id"}
    if "type" not in out and "role" in out:
        out["type"] = "message"
    if out.get("type") == "message" and isinstance(out.get("content"), str):
        part = "output_text" if out.get("role") == "assistant" else "input_text"
        out["content"] = [{"type": part, "text": out["content"]}]
    return {"id": item.get("id") or item_id or new_id(_ID_PREFIX.get(out.get("type"), "item_")), **out}


def item_page(items: list[dict[str, Any]], after: str | None, limit: int, order: str, owner: str) -> dict[str, Any]:
    """A page of listed items: newest first unless `order` is asc, `limit` of them, those after item `after` (a 400
    when `owner` holds no such item)."""
    items = list(reversed(items)) if order == "desc" else list(items)
    if after is not None:
        at = next((i for i, it in enumerate(items) if it["id"] == after), None)
        if at is None:
            raise bad_request(f"No item with id '{after}' in {owner}", param="after")
        items = items[at + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}


@dataclass
class Conversation:
    id: str
    metadata: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    created_at: int = field(default_factory=lambda: int(time.time()))

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata}


class ConversationStore:
    def __init__(self, max_entries: int = 256, max_chars: int = 64 * 2**20):
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._convs: OrderedDict[str, Conversation] = OrderedDict()
        self._chars: dict[str, int] = {}
        self._lock = threading.Lock()

    def create(self, items: list[dict[str, Any]], metadata: dict[str, Any] | None) -> Conversation:
        conv = Conversation(new_id("conv_"), dict(metadata or {}))
        with self._lock:
            self._convs[conv.id] = conv
            self._chars[conv.id] = 0
            self._add(conv, items)
        return conv

    def get(self, conv_id: str) -> Conversation | None:
        with self._lock:
            conv = self._convs.get(conv_id)
            if conv is not None:
                self._convs.move_to_end(conv_id)
            return conv

    def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Append items (ids made up where missing); -> the items as stored, or None for an unknown id."""
        with self._lock:
            conv = self._convs.get(conv_id)
            return None if conv is None else self._add(conv, items)

    def delete_item(self, conv_id: str, item_id: str) -> bool:
        with self._lock:
            conv = self._convs.get(conv_id)
            at = next((i for i, it in enumerate(conv.items) if it["id"] == item_id), None) if conv else None
            if at is None:
                return False
            self._chars[conv_id] -= size_of(conv.items.pop(at))
            return True

    def delete(self, conv_id: str) -> bool:
        with self._lock:
            self._chars.pop(conv_id, None)
            return self._convs.pop(conv_id, None) is not None

    def __len__(self) -> int:
        return len(self._convs)

    def _add(self, conv: Conversation, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        added = [listed_item(it) for it in items]
        conv.items.extend(added)
        self._chars[conv.id] += sum(size_of(it) for it in added)
        self._convs.move_to_end(conv.id)
        while len(self._convs) > 1 and (len(self._convs) > self.max_entries
                                        or sum(self._chars.values()) > self.max_chars):  # the one written stays
            oldest, _ = self._convs.popitem(last=False)
            self._chars.pop(oldest)
        return added
