"""Host-RAM tier of the prefix cache: named rows holding a copy of one index of two device tensors.

The same mechanism serves both things the device evicts and a later prompt may want back:
- GDN checkpoints (`host_checkpoints`): the conv + recurrent state of every GDN layer of a checkpoint slot. A slot
  costs as much as thousands of KV tokens (147 MiB on the 27B), so the device keeps few; an evicted one is copied
  here under its page-chain name, and a hit copies the row straight into the lane's GDN slot.
- KV pages (`host_pages`): K and V of every attention layer of a named page the KV pool gives to a new allocation;
  a prompt whose chain continues past the device's pages into rows here gets them copied into pages it
  allocates anyway, so only what follows is computed.
Rows are allocated once (`--host-cache-gib`, `--host-kv-gib`), page-locked on CUDA so both copies are
asynchronous on the engine's stream: a spill is queued before whatever overwrites the device index, a restore
before the step that reads it, so stream order alone keeps them right (the CPU never touches the rows). Names, LRU
eviction and pins (rows a request is about to copy) are a CheckpointPool over the row ids.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.host_memory import host_tensors
from hinfer.model.state import ModelState


class HostTier:
    def __init__(self, a: torch.Tensor, b: torch.Tensor, rows: int) -> None:
        """a, b: device tensors [layers, index, ...]; a row holds a[:, i] and b[:, i] of one index i."""
        self.a, self.b = a, b
        self.pinned = a.device.type == "cuda"  # pinned host memory: the copies can be asynchronous
        # [row, layer, ...]: one row is contiguous, so each copy is a single transfer
        self.ha, self.hb = host_tensors(self, [((rows, a.shape[0], *a.shape[2:]), a.dtype),
                                               ((rows, b.shape[0], *b.shape[2:]), b.dtype)], self.pinned)
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

    @property
    def nbytes(self) -> int:
        return self.ha.nbytes + self.hb.nbytes

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, name: bytes) -> bool:
        return name in self.index

    def spill(self, name: bytes, i: int) -> None:
        """Copy device index `i` (named `name`, about to be overwritten) into a host row."""
        row = self.index.reserve(name)
        if row is None:  # already on the host (saved, restored and saved again), or every row pinned
            return
        self.copy_out(row, i)
        self.spills += 1

    def restore(self, names: list[bytes], targets: list[int]) -> None:
        """Copy the host rows of `names` (pinned by the caller) into device indices `targets`."""
        self.copy_in([self.index.slot_of(name) for name in names], targets)
        self.restores += len(names)

    def copy_out(self, row: int, i: int) -> None:
        """Device index `i` into host row `row` (the copies alone: the names are the caller's)."""
        self.ha[row].copy_(self.a[:, i], non_blocking=self.pinned)
        self.hb[row].copy_(self.b[:, i], non_blocking=self.pinned)

    def copy_in(self, rows: list[int], targets: list[int]) -> None:
        """Host rows `rows` into device indices `targets`."""
        for row, i in zip(rows, targets):
            self.a[:, i].copy_(self.ha[row], non_blocking=self.pinned)
            self.b[:, i].copy_(self.hb[row], non_blocking=self.pinned)

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

    def discard(self, name: bytes) -> None:
        self.index.discard(name)

    def clear(self) -> None:
        self.index.clear()

    def check(self) -> None:
        self.index.check()


def tier_tensors(state: ModelState, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two device tensors a tier of `kind` copies rows of: `checkpoints`, GDN conv + recurrent state by slot;
    `pages`, K and V by page (whole pages: int8 / int4 scales travel with their rows)."""
    if kind == "checkpoints":
        return state.conv_state, state.ssm_state
    if kind == "pages":
        return state.k_pages, state.v_pages
    raise ValueError(f"no host tier of kind {kind!r}")
