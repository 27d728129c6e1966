"""Content-addressed KV pages: a hash chain over full pages, reference counts, and an LRU of cached free pages.

A page is named by hash(parent page's hash, its token ids), so equal names mean an equal token prefix up to that
page's end (vLLM's scheme). Pages in use carry a reference count; a page whose count drops to zero keeps its
name and waits in the LRU until the free list runs dry, so a later request with the same prefix takes it back
instead of recomputing it. Only full pages are ever named: a partial page is private to the request writing it.

`PagePool` replaces the scheduler's plain free list for pages; with nothing ever registered it behaves exactly
like one (LIFO, double frees are errors).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence

ROOT = b""  # the parent of a sequence's first page


def hash_page(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The name of a full page: 128-bit BLAKE2b of the parent's name and the token ids (collisions are out of
    reach, so a name match is a token-prefix match)."""
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


def chain_hashes(tokens: Sequence[int], page_size: int, parent: bytes = ROOT, first_page: int = 0) -> list[bytes]:
    """Names of the full pages of `tokens` from page `first_page` on, chained from `parent` (the name of page
    first_page - 1, or ROOT)."""
    out: list[bytes] = []
    for j in range(first_page, len(tokens) // page_size):
        parent = hash_page(parent, tokens[j * page_size : (j + 1) * page_size])
        out.append(parent)
    return out


class PagePool:
    """KV page ids in [first, total): free (never named), in use (ref count > 0), or cached (named, count 0, in the
    LRU). Allocation takes free pages first, then evicts the least recently released cached ones."""

    def __init__(self, total: int, first: int = 0, on_evict: Callable[[bytes], None] | None = None) -> None:
        self.total = total
        self.first = first
        self.on_evict = on_evict  # told the name of every evicted page (its GDN checkpoint goes too)
        self.on_spill: Callable[[bytes, int], None] | None = None  # told (name, page) first: a copy to host
        self._free = list(range(total - 1, first - 1, -1))
        self._ref: dict[int, int] = {}
        self._name: dict[int, bytes] = {}  # page -> name, for named pages (in use or cached)
        self._page: dict[bytes, int] = {}  # name -> page
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached pages, least recently released first
        self.evictions = 0

    # ---- sizes -------------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.total - self.first

    @property
    def num_free(self) -> int:
        """Pages an allocation can take now: free ones plus cached ones it may evict."""
        return len(self._free) + len(self._lru)

    @property
    def num_cached(self) -> int:
        """Named pages (in use or waiting in the LRU)."""
        return len(self._page)

    @property
    def num_in_use(self) -> int:
        return len(self._ref)

    def ref_count(self, page: int) -> int:
        return self._ref.get(page, 0)

    def can_alloc(self, n: int, reusing: Sequence[int] = ()) -> bool:
        """Whether `n` new pages fit once the cached pages in `reusing` are taken back (they leave the LRU)."""
        return n <= self.num_free - sum(1 for p in reusing if p in self._lru)

    # ---- allocation --------------------------------------------------------------------------------------
    def alloc(self, n: int) -> list[int]:
        if n > self.num_free:
            raise MemoryError(f"asked for {n} pages, {self.num_free} free")
        out = []
        for _ in range(n):
            p = self._free.pop() if self._free else self._evict()
            self._ref[p] = 1
            out.append(p)
        return out

    def _evict(self) -> int:
        p, _ = self._lru.popitem(last=False)
        name = self._name.pop(p)
        del self._page[name]
        self.evictions += 1
        if self.on_spill is not None:
            self.on_spill(name, p)
        if self.on_evict is not None:
            self.on_evict(name)
        return p

    def evict_cached(self) -> int:
        """Evict every cached page now, least recently released first, as allocations would one at a time (each is
        spilled first when there is a host tier); they join the free list. -> how many."""
        n = len(self._lru)
        for _ in range(n):
            self._free.append(self._evict())
        return n

    def acquire(self, pages: Sequence[int]) -> None:
        """Take another reference to named pages (a prefix hit); cached ones leave the LRU."""
        for p in pages:
            if p in self._ref:
                self._ref[p] += 1
            else:
                del self._lru[p]  # KeyError: neither in use nor cached, a caller bug
                self._ref[p] = 1

    def release(self, pages: Sequence[int]) -> None:
        """Drop one reference each. At zero a named page joins the LRU, an unnamed one the free list. Released
        last page first, so a chain's tail is evicted before its head (a head without its tail still hits)."""
        for p in reversed(pages):
            n = self._ref.get(p)
            if n is None:
                raise ValueError(f"page {p} released twice or never allocated")
            if n > 1:
                self._ref[p] = n - 1
                continue
            del self._ref[p]
            if p in self._name:
                self._lru[p] = None
            else:
                self._free.append(p)

    free = release  # the FreeList spelling

    # ---- names -------------------------------------------------------------------------------------------
    def register(self, page: int, name: bytes) -> bool:
        """Name a full page in use. False (and the page stays private) when another page already holds that
        content or this page is named already."""
        if page not in self._ref or page in self._name or name in self._page:
            return False
        self._name[page] = name
        self._page[name] = page
        return True

    def holds(self, name: bytes) -> bool:
        """Whether a page named `name` is cached or in use."""
        return name in self._page

    def match(self, names: Sequence[bytes]) -> list[int]:
        """Pages of the longest leading run of `names` that are cached or in use."""
        out = []
        for h in names:
            p = self._page.get(h)
            if p is None:
                break
            out.append(p)
        return out

    def clear(self) -> None:
        """Forget every name: cached pages go back to the free list; pages in use stay with their requests and
        become private (freed, not cached, when released)."""
        for p in self._lru:
            self._free.append(p)
        self._lru.clear()
        self._name.clear()
        self._page.clear()

    def check(self) -> None:
        """Invariants (tests): every page is exactly one of free, in use, cached; names are a bijection."""
        free, used, lru = set(self._free), set(self._ref), set(self._lru)
        assert len(free) == len(self._free), "a page is on the free list twice"
        assert not (free & used or free & lru or used & lru), "a page is in two states"
        assert free | used | lru == set(range(self.first, self.total)), "a page is lost"
        assert all(n > 0 for n in self._ref.values())
        assert {self._page[h]: h for h in self._page} == self._name
        assert lru <= set(self._name) and not free & set(self._name)
