"""`EngineCore.spill_prefix_cache`: every cached page and checkpoint leaves the device at once, as churn would
push them out one by one. With host tiers the next turn restores both from host RAM (the output of a cache-off
engine); without them the cache is simply empty."""

from __future__ import annotations

import random

import pytest
import torch
from test_prefix_cache import PS, assert_clean, run_all, toks  # the same engine helpers
from test_prefix_spill import greedy_lp, host_bytes, lp_gap, run_lp
from test_prefix_spill_kv import assert_host_kv_clean, kv_rows_bytes

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.prefix_cache import PagePool
from hinfer.engine.protocol import GenerationRequest


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_pools_evict_everything_but_what_is_held():
    spilled: list[tuple[bytes, int]] = []
    ck = CheckpointPool([5, 6, 7], on_evict=lambda name, slot: spilled.append((name, slot)))
    for name in (b"a", b"b", b"c"):
        ck.reserve(name)
    ck.pin(b"b")
    assert ck.evict_all() == 2 and [n for n, _ in spilled] == [b"a", b"c"] and list(ck._slot) == [b"b"]
    assert ck.evictions == 2
    ck.check()
    gone: list[bytes] = []
    pool = PagePool(6, first=1, on_evict=gone.append)
    a = pool.alloc(3)
    for p, name in zip(a, (b"x", b"y", b"z")):
        pool.register(p, name)
    pool.release(a[1:])  # y, z cached; x still in use
    assert pool.evict_cached() == 2 and sorted(gone) == [b"y", b"z"] and pool.match([b"x", b"y"]) == [a[0]]
    assert pool.num_free == 4
    pool.check()


def test_next_turn_restores_from_host_after_a_spill(make_engine_core, tiny_model):
    rng = random.Random(3)
    on = make_engine_core(prefix_cache_slots=2, host_cache_bytes=host_bytes(tiny_model, 4),
                          host_kv_bytes=kv_rows_bytes(tiny_model, 16))
    off = make_engine_core(prefix_cache=False)
    history = toks(rng, 5 * PS)  # a turn boundary on a page boundary
    run_lp(on, [GenerationRequest("t1", history, greedy_lp(1))])
    on.spill_prefix_cache()
    ex = on.stats().extra
    assert (ex["prefix_cached_pages"], ex["prefix_checkpoints"]) == (0, 0)
    assert (ex["prefix_host_kv_pages"], ex["prefix_host_checkpoints"]) == (5, 2)  # the boundary and the one before
    turn2 = GenerationRequest("t2", history + toks(rng, 7), greedy_lp(6))
    a, b = run_lp(on, [turn2]), run_lp(off, [turn2])
    assert lp_gap(a, b) < 1e-4
    ex2 = on.stats().extra
    assert ex2["prefix_hit_tokens"] - ex["prefix_hit_tokens"] == 5 * PS
    assert (ex2["prefix_host_restores"], ex2["prefix_host_kv_restores"]) == (1, 5)
    assert_clean(on)
    assert_host_kv_clean(on)


def test_without_host_tiers_a_spill_empties_the_cache(make_engine_core):
    rng = random.Random(4)
    core = make_engine_core(host_cache_bytes=0)
    history = toks(rng, 3 * PS)
    run_all(core, [GenerationRequest("t1", history, greedy_lp(1))])
    core.spill_prefix_cache()
    assert core.stats().extra["prefix_checkpoints"] == 0
    (_, cached), = run_all(core, [GenerationRequest("t2", history + toks(rng, 5), greedy_lp(2))]).values()
    assert cached == 0
    assert_clean(core)
