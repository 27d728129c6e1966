"""Stored Responses (`store: true`) for GET/DELETE /v1/responses/{id} and `previous_response_id`.

In memory and bounded (least recently used goes first): a server restart forgets them, which clients of
`previous_response_id` must already cope with (OpenAI expires them too). Each entry keeps the response object and
the conversation it continued, as input items, so a follow-up can be rendered without the client resending it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class StoredResponse:
    response: dict[str, Any]  # the final response object, as returned
    history: list[dict[str, Any]]  # the input items this response answered (earlier turns included)
    chars: int  # rough size, for the store's budget


def size_of(obj: Any) -> int:
    """A JSON-like value's rough size in characters (the stores' budgets)."""
    if isinstance(obj, str):
        return len(obj)
    if isinstance(obj, dict):
        return sum(size_of(v) for v in obj.values()) + 8 * len(obj)
    if isinstance(obj, list):
        return sum(size_of(v) for v in obj) + 8
    return 8


class ResponseStore:
    def __init__(self, max_entries: int = 512, max_chars: int = 64 * 2**20):
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # routes run on one loop; the lock keeps it safe if that ever changes

    def put(self, response: dict[str, Any], history: list[dict[str, Any]]) -> None:
        entry = StoredResponse(response, history, size_of(response) + size_of(history))
        with self._lock:
            self._drop(response["id"])
            self._items[response["id"]] = entry
            self._chars += entry.chars
            while self._items and (len(self._items) > self.max_entries or self._chars > self.max_chars):
                self._drop(next(iter(self._items)))

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._items.get(response_id)
            if entry is not None:
                self._items.move_to_end(response_id)
            return entry

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._drop(response_id)

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, response_id: str) -> bool:
        entry = self._items.pop(response_id, None)
        if entry is None:
            return False
        self._chars -= entry.chars
        return True
