"""FreeList: the engine's allocator of GDN slots and lane ids."""

from __future__ import annotations


class FreeList:
    """A LIFO free list of integer ids in [first, total). Double frees and foreign ids are errors."""

    def __init__(self, total: int, first: int = 0) -> None:
        self.total = total
        self.first = first
        self._free = list(range(total - 1, first - 1, -1))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def capacity(self) -> int:
        return self.total - self.first

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise MemoryError(f"asked for {n}, {len(self._free)} free")
        out = [self._free.pop() for _ in range(n)]
        self._used.update(out)
        return out

    def free(self, ids: list[int]) -> None:
        for i in ids:
            if i not in self._used:
                raise ValueError(f"id {i} freed twice or never allocated")
            self._used.remove(i)
            self._free.append(i)
