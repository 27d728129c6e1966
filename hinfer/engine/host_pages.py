"""Host-RAM spill of named KV pages: the second tier of the prefix cache's page index.

A named page that the KV pool evicts (its LRU gave it to a new allocation) is copied first into a row of a host
buffer under its name, K and V of every attention layer. A later prompt whose page chain continues past the
pages still on the device into pages held here gets them copied back into pages it allocates anyway, so only
what follows is computed. The copies are ordered on the engine's stream like the checkpoint ones
(host_checkpoints.py): a spill is queued when the page is handed out, before anything writes it; a restore
before the step that reads it. Rows are LRU-evicted, with pins for rows a request is about to copy.
"""

from __future__ import annotations

from collections.abc import Callable

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.host_memory import host_tensors
from hinfer.engine.state import ModelState


class HostPages:
    def __init__(self, state: ModelState, rows: int) -> None:
        self.state = state
        k = state.k_cache  # [kv layers, pages, page_size, kv heads, head_dim]
        self.pinned = k.device.type == "cuda"
        shape = (rows, k.shape[0], *k.shape[2:])
        self.k, self.v = host_tensors(self, [(shape, k.dtype), (shape, k.dtype)], self.pinned)
        self.index = CheckpointPool(range(rows))  # names, LRU, pins of the rows
        self.spills = 0
        self.restores = 0

    @property
    def on_evict(self) -> Callable[[bytes, int], None] | None:
        return self.index.on_evict

    @on_evict.setter
    def on_evict(self, fn: Callable[[bytes, int], None] | None) -> None:
        self.index.on_evict = fn  # told (name, row) of a row's LRU eviction

    @property
    def capacity(self) -> int:
        return self.index.capacity

    @property
    def evictions(self) -> int:
        return self.index.evictions

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, name: bytes) -> bool:
        return name in self.index

    def spill(self, page: int, name: bytes) -> None:
        """Copy KV page `page` (named `name`, about to be reused) into a host row."""
        row = self.index.reserve(name)
        if row is None:  # on the host already, or every row pinned
            return
        self.k[row].copy_(self.state.k_cache[:, page], non_blocking=self.pinned)
        self.v[row].copy_(self.state.v_cache[:, page], non_blocking=self.pinned)
        self.spills += 1

    def restore(self, names: list[bytes], pages: list[int]) -> None:
        """Copy the host rows of `names` (pinned by the caller) into KV pages `pages`."""
        for name, page in zip(names, pages):
            row = self.index.slot_of(name)
            self.state.k_cache[:, page].copy_(self.k[row], non_blocking=self.pinned)
            self.state.v_cache[:, page].copy_(self.v[row], non_blocking=self.pinned)
            self.restores += 1

    def match(self, names: list[bytes]) -> int:
        """How many leading `names` have a row."""
        n = 0
        while n < len(names) and names[n] in self.index:
            n += 1
        return n

    def pin(self, name: bytes) -> None:
        self.index.pin(name)

    def unpin(self, name: bytes) -> None:
        self.index.unpin(name)

    def clear(self) -> None:
        self.index.clear()

    def check(self) -> None:
        self.index.check()
