"""Host-RAM spill of KV pages: a named page the KV pool evicts is copied to a host row, and a prompt whose chain
continues into host rows gets them copied back. With a KV pool far smaller than the conversations, hits come
through host pages, output (tokens and logprobs) equals a cache-off engine, and a soak leaks nothing.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_prefix_cache import PS, assert_clean, soak_turns, toks  # the same engine helpers
from test_prefix_spill import greedy_lp, host_bytes, lp_gap, run_lp

from hinfer.engine.memory_plan import kv_page_bytes
from hinfer.engine.protocol import GenerationRequest


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def page_bytes(core) -> int:
    return kv_page_bytes(core.runner.state.cfg, core.ecfg, core.ecfg.kv_dtype)


def kv_rows_bytes(tiny_model, rows: int) -> int:
    cfg, _ = tiny_model
    per_page = len(cfg.attn_layers) * 2 * PS * cfg.num_key_value_heads * cfg.head_dim * 4  # fp32 on the CPU
    return rows * per_page


def assert_host_kv_clean(core) -> None:
    h = core.prefix.host_pages
    h.check()
    assert len(h) == 0 and h.index.num_pinned == 0


def test_conversations_resume_through_host_pages(make_engine_core, tiny_model):
    """16 KV pages for six conversations of up to ~10 pages each: their pages leave the device between turns."""
    rng = random.Random(21)
    kw = dict(max_concurrency=2, kv_capacity=16 * PS, prefill_chunk=32)
    on = make_engine_core(prefix_cache_slots=2, host_cache_bytes=host_bytes(tiny_model, 32),
                          host_kv_bytes=kv_rows_bytes(tiny_model, 128), **kw)
    off = make_engine_core(prefix_cache=False, **kw)
    assert on.prefix.host_pages.capacity == 128 and page_bytes(on) * 128 == kv_rows_bytes(tiny_model, 128)
    convs = [toks(rng, rng.randint(30, 60)) for _ in range(6)]
    for rnd in range(8):
        reqs = []
        for i in rng.sample(range(6), 2):
            h = convs[i]
            if len(h) > 150:
                h[:] = toks(rng, 30)
            h += toks(rng, rng.randint(1, 9))
            reqs.append((i, GenerationRequest(f"c{i}-{rnd}", list(h), greedy_lp(rng.randint(3, 10)))))
        a, b = run_lp(on, [r for _, r in reqs]), run_lp(off, [r for _, r in reqs])
        assert lp_gap(a, b) < 1e-4
        for i, r in reqs:
            convs[i] += a[r.request_id][0]
        on.prefix.pages.check()
        on.prefix.host_pages.check()
    st = on.stats().extra
    assert st["prefix_evicted_pages"] > 0 and st["prefix_host_kv_spills"] > 0 and st["prefix_host_kv_restores"] > 0
    assert st["prefix_hit_tokens"] > 0
    assert_clean(on)
    assert_host_kv_clean(on)


def test_without_host_pages_the_same_workload_hits_less(make_engine_core, tiny_model):
    def hit_tokens(host_kv: int) -> int:
        rng = random.Random(21)
        core = make_engine_core(max_concurrency=2, kv_capacity=16 * PS, prefill_chunk=32, prefix_cache_slots=2,
                                host_cache_bytes=host_bytes(tiny_model, 32), host_kv_bytes=host_kv)
        convs = [toks(rng, rng.randint(30, 60)) for _ in range(6)]
        for rnd in range(8):
            reqs = []
            for i in rng.sample(range(6), 2):
                convs[i] += toks(rng, rng.randint(1, 9))
                reqs.append(GenerationRequest(f"c{i}-{rnd}", list(convs[i]), greedy_lp(4)))
            out = run_lp(core, reqs)
            for r in reqs:
                convs[int(r.request_id[1])] += out[r.request_id][0]
        return core.stats().extra["prefix_hit_tokens"]

    assert hit_tokens(kv_rows_bytes(tiny_model, 128)) > hit_tokens(0)


def test_soak_with_host_pages_leaks_nothing(make_engine_core, tiny_model):
    rng = random.Random(22)
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=32, kv_capacity=40 * PS,
                            prefix_cache_slots=2, host_cache_bytes=host_bytes(tiny_model, 6),
                            host_kv_bytes=kv_rows_bytes(tiny_model, 24))
    st0 = core.stats()
    roots = [toks(rng, rng.randint(10, 70)) for _ in range(6)]
    def check_pools(core) -> None:
        core.prefix.pages.check()
        core.prefix.host_pages.check()

    soak_turns(core, rng, roots, requests=250, max_len=250, check=check_pools)
    st = core.stats()
    extra = st.extra
    assert extra["prefix_host_kv_restores"] > 10 and extra["prefix_host_kv_evictions"] > 0
    assert (st.pages_free, st.slots_free, st.queue_depth) == (st0.pages_free, st0.slots_free, 0)
    assert_clean(core)
    assert_host_kv_clean(core)


def test_host_kv_rows_in_the_plan_and_flags(tiny_model):
    from hinfer.cli.engine_args import engine_config_from_args
    from hinfer.cli.main import build_parser
    from hinfer.config import EngineConfig
    from hinfer.engine.factory import state_shape
    from hinfer.engine.memory_plan import plan_memory

    args = build_parser().parse_args(["plan", "x", "--host-kv-gib", "0.5"])
    assert engine_config_from_args(args).host_kv_bytes == 2**29
    cfg, _ = tiny_model
    ecfg = EngineConfig(device="cpu", dtype="fp32", max_concurrency=2, max_context=256, page_size=16,
                        host_kv_bytes=kv_rows_bytes(tiny_model, 7) + 5)
    plan = plan_memory(cfg, ecfg, weights="bf16", device_bytes=2**33, device_name="test", device="cpu")
    assert plan.host_kv_pages == 7 and state_shape(cfg, ecfg, plan).host_kv_pages == 7
    assert "7 spilled KV pages" in plan.table() and plan.total == sum(r.bytes for r in plan.rows)
    off = plan_memory(cfg, EngineConfig(device="cpu", prefix_cache=False, host_kv_bytes=2**30), weights="bf16",
                      device_bytes=2**33, device_name="test", device="cpu")
    assert off.host_kv_pages == 0


def test_a_wrong_page_restore_would_be_caught(make_engine_core, tiny_model, monkeypatch):
    """The logprob check above is sensitive to the restored KV: pages left as they were are caught."""
    rng = random.Random(21)
    kw = dict(max_concurrency=2, kv_capacity=16 * PS, prefill_chunk=32)
    on = make_engine_core(prefix_cache_slots=2, host_cache_bytes=host_bytes(tiny_model, 32),
                          host_kv_bytes=kv_rows_bytes(tiny_model, 128), **kw)
    monkeypatch.setattr(on.prefix.host_pages, "restore", lambda names, pages: None)
    off = make_engine_core(prefix_cache=False, **kw)
    convs = [toks(rng, rng.randint(30, 60)) for _ in range(6)]
    gap = 0.0
    for rnd in range(8):
        reqs = []
        for i in rng.sample(range(6), 2):
            convs[i] += toks(rng, rng.randint(1, 9))
            reqs.append((i, GenerationRequest(f"c{i}-{rnd}", list(convs[i]), greedy_lp(4))))
        a, b = run_lp(on, [r for _, r in reqs]), run_lp(off, [r for _, r in reqs])
        gap = max([gap] + [abs(x - y) for k in a for x, y in zip(a[k][1], b[k][1])])
        for i, r in reqs:
            convs[i] += b[r.request_id][0]
    assert gap > 1e-3
