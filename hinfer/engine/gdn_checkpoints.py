"""GDN checkpoints: the conv + recurrent state of every GDN layer saved at a page-aligned position, kept in a pool
of extra ModelState slots and named by the hash of the page chain they end at (prefix_cache.py).

Attention KV can be shared page by page, but a Gated DeltaNet layer keeps one running state per sequence that
cannot be cut at an arbitrary token; a prefix is reusable only where that state was saved. This class only does
the bookkeeping (names, slots, LRU, pins); the device copies are ModelState.copy_slots. A pinned checkpoint (a
request about to copy it into its own slot) is never evicted or dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence


class CheckpointPool:
    def __init__(self, slots: Sequence[int], on_evict: Callable[[bytes, int], None] | None = None) -> None:
        self.slots = list(slots)
        self.on_evict = on_evict  # told (name, slot) of an LRU victim before its slot is reused (host spill)
        self._free = list(reversed(self.slots))
        self._slot: OrderedDict[bytes, int] = OrderedDict()  # name -> slot, least recently used first
        self._pins: dict[bytes, int] = {}
        self.saved = 0
        self.evictions = 0

    @property
    def capacity(self) -> int:
        return len(self.slots)

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, name: bytes) -> bool:
        return name in self._slot

    @property
    def num_pinned(self) -> int:
        return len(self._pins)

    def pin(self, name: bytes) -> int:
        """Hold a checkpoint for a copy into a request's slot; -> its slot. Counts as a use (LRU)."""
        self._slot.move_to_end(name)
        self._pins[name] = self._pins.get(name, 0) + 1
        return self._slot[name]

    def slot_of(self, name: bytes) -> int:
        return self._slot[name]

    def unpin(self, name: bytes) -> None:
        n = self._pins[name] - 1
        if n:
            self._pins[name] = n
        else:
            del self._pins[name]

    def reserve(self, name: bytes) -> int | None:
        """A slot to save the state named `name` into: a free one, else the least recently used unpinned one
        (evicted). None when the name is saved already (it counts as used) or every slot is pinned."""
        if name in self._slot:
            self._slot.move_to_end(name)
            return None
        if self._free:
            slot = self._free.pop()
        else:
            victim = next((h for h in self._slot if h not in self._pins), None)
            if victim is None:
                return None
            slot = self._evict(victim)
        self._slot[name] = slot
        self.saved += 1
        return slot

    def _evict(self, victim: bytes) -> int:
        """Take an unpinned checkpoint out (on_evict first: its spill); -> its slot."""
        slot = self._slot.pop(victim)
        self.evictions += 1
        if self.on_evict is not None:
            self.on_evict(victim, slot)
        return slot

    def evict_all(self) -> int:
        """Evict every unpinned checkpoint, least recently used first, as saves under pressure would one at a
        time; -> how many."""
        victims = [h for h in self._slot if h not in self._pins]
        for name in victims:
            self._free.append(self._evict(name))
        return len(victims)

    def discard(self, name: bytes) -> None:
        """Drop a checkpoint (its page chain was evicted, or a newer one replaces it); pinned ones stay."""
        if name in self._slot and name not in self._pins:
            self._free.append(self._slot.pop(name))

    def clear(self) -> None:
        """Drop every unpinned checkpoint."""
        for name in [h for h in self._slot if h not in self._pins]:
            self._free.append(self._slot.pop(name))

    def check(self) -> None:
        """Invariants (tests): every slot is free or holds exactly one checkpoint; pins name live checkpoints."""
        held = list(self._slot.values())
        assert sorted(held + self._free) == sorted(self.slots), "a checkpoint slot is lost or doubled"
        assert set(self._pins) <= set(self._slot) and all(n > 0 for n in self._pins.values())
