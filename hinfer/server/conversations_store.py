"""The Conversations API's conversations: ordered input items (messages, calls, their outputs, reasoning) that a
Responses request with `conversation` continues and then extends with its input and output.

In memory and bounded like the stored responses (least recently used goes first; responses_store.py): a restart
forgets them. Every item is kept as OpenAI lists it (item_pages.listed_item): with an `id`, a message's text
shorthand spelled out as content parts.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from hinfer.server.ids import new_id
from hinfer.server.item_pages import listed_item
from hinfer.server.responses_store import size_of


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
        self.max_conversation_chars = max_chars // 4  # one conversation's share: past it, no more items go in
        self._convs: OrderedDict[str, Conversation] = OrderedDict()
        self._chars: dict[str, int] = {}
        self._total = 0  # sum of _chars
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

    def chars(self, conv_id: str) -> int:
        """How many characters a conversation's items hold (its budget: max_conversation_chars)."""
        with self._lock:
            return self._chars.get(conv_id, 0)

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
            gone = size_of(conv.items.pop(at))
            self._chars[conv_id] -= gone
            self._total -= gone
            return True

    def delete(self, conv_id: str) -> bool:
        with self._lock:
            self._total -= self._chars.pop(conv_id, 0)
            return self._convs.pop(conv_id, None) is not None

    def __len__(self) -> int:
        return len(self._convs)

    def _add(self, conv: Conversation, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        added = [listed_item(it) for it in items]
        conv.items.extend(added)
        size = sum(size_of(it) for it in added)
        self._chars[conv.id] += size
        self._total += size
        self._convs.move_to_end(conv.id)
        while len(self._convs) > 1 and (len(self._convs) > self.max_entries
                                        or self._total > self.max_chars):  # the one written stays
            oldest, _ = self._convs.popitem(last=False)
            self._total -= self._chars.pop(oldest)
        return added
