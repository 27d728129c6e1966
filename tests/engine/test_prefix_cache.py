"""Prefix cache: the page index (hash chain, ref counts, LRU) and the checkpoint pool on their own."""

from __future__ import annotations

import pytest

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.prefix_cache import ROOT, PagePool, chain_hashes, hash_page

PS = 16  # the engine fixture's page size


# ---- the page index ----------------------------------------------------------------------------------------
def test_hash_chain_names_a_prefix():
    a = list(range(1, 50))
    b = a[:20] + [999] + a[21:]  # differs in the second page
    ha, hb = chain_hashes(a, PS), chain_hashes(b, PS)
    assert len(ha) == 3  # full pages only
    assert ha[0] == hb[0] and ha[1] != hb[1] and ha[2] != hb[2]  # a change poisons every later page
    assert chain_hashes(a[16:48], PS, ha[0]) == ha[1:]  # continuing a chain == hashing it whole
    assert ha[0] == hash_page(ROOT, a[:16]) and chain_hashes(a[:15], PS) == []
    assert chain_hashes([1] * 16 + [2] * 16, PS)[1] != chain_hashes([2] * 32, PS)[1]  # the parent counts


def test_page_pool_ref_counts_and_lru():
    evicted = []
    pool = PagePool(9, first=1, on_evict=evicted.append)  # pages 1..8
    a = pool.alloc(3)
    assert a == [1, 2, 3] and pool.num_free == 5
    names = [bytes([i]) * 16 for i in range(3)]
    assert all(pool.register(p, h) for p, h in zip(a, names))
    assert not pool.register(a[0], names[0]) and not pool.register(pool.alloc(1)[0], names[1])  # taken names
    pool.release([4])
    assert pool.match(names) == a and pool.match([names[1]]) == [2]
    pool.acquire(a[:2])  # a second request shares the first two pages
    assert [pool.ref_count(p) for p in a] == [2, 2, 1]
    pool.release(a)
    assert [pool.ref_count(p) for p in a] == [1, 1, 0] and pool.num_free == 6  # page 3 cached, still counted free
    assert pool.match(names) == a  # cached pages still match
    pool.release(a[:2])
    pool.check()
    assert pool.num_cached == 3 and pool.num_in_use == 0 and pool.num_free == 8
    # the free list goes first; then the LRU, least recently released first (page 3, then the chain's tail 2)
    assert not pool.can_alloc(7, reusing=[1, 2]) and pool.can_alloc(6, reusing=[1, 2])
    got = pool.alloc(6)
    assert evicted == [names[2]] and pool.match(names) == [1, 2] and 3 in got
    pool.alloc(1)
    assert evicted == [names[2], names[1]] and pool.match(names) == [1]
    with pytest.raises(MemoryError):
        pool.alloc(2)
    with pytest.raises(ValueError):
        pool.release([2, 2])
    pool.check()


def test_page_pool_clear_keeps_pages_in_use():
    pool = PagePool(5, first=1)
    a = pool.alloc(2)
    pool.register(a[0], b"x" * 16)
    pool.register(a[1], b"y" * 16)
    pool.release([a[1]])  # cached
    pool.clear()
    assert pool.num_cached == 0 and pool.match([b"x" * 16]) == [] and pool.ref_count(a[0]) == 1
    pool.release([a[0]])  # in use during the clear: freed, not cached
    pool.check()
    assert pool.num_free == 4 and pool.num_cached == 0


def test_checkpoint_pool_lru_pins_and_discard():
    ck = CheckpointPool([10, 11])
    assert ck.reserve(b"a") == 11 - 1 and ck.reserve(b"b") == 11
    assert ck.reserve(b"a") is None  # saved already: a use, so "b" is now the oldest
    assert ck.reserve(b"c") == 11 and b"b" not in ck and ck.evictions == 1
    assert ck.pin(b"a") == 10
    assert ck.reserve(b"d") == 11  # "c" evicted: "a" is pinned
    ck.discard(b"a")
    assert b"a" in ck  # pinned: stays
    assert ck.reserve(b"e") == 11  # only the unpinned slot turns over
    ck.pin(b"e")
    assert ck.reserve(b"f") is None  # every slot pinned: nothing saved
    ck.unpin(b"a")
    ck.unpin(b"e")
    ck.clear()
    ck.check()
    assert len(ck) == 0 and ck.num_pinned == 0
