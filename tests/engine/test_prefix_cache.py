"""Prefix cache: the page index (hash chain, ref counts, LRU) and the checkpoint pool on their own, then the engine:
greedy output equals a cache-off engine across turns, under concurrency and under eviction churn, and a soak
leaks no page, slot, checkpoint or reference.
"""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.prefix_cache import ROOT, PagePool, chain_hashes, hash_page
from hinfer.engine.protocol import GenerationRequest, QueueFullError
from hinfer.sampling_params import SamplingParams

PS = 16  # the engine fixture's page size


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # many tiny kernels: one thread is faster on a shared box
    yield
    torch.set_num_threads(old)


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


# ---- the engine --------------------------------------------------------------------------------------------
def run_all(core, reqs: list[GenerationRequest], lps: dict[str, list[float]] | None = None
            ) -> dict[str, tuple[list[int], int]]:
    """-> request id: (tokens, cached_tokens); the sampled tokens' logprobs go to `lps` when given."""
    for r in reqs:
        core.add(r)
    toks: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    first_cached: dict[str, int | None] = {}  # what each request's first event said, from admission
    out: dict[str, tuple[list[int], int]] = {}
    while len(out) < len(reqs):
        for ev in core.step():
            if not toks[ev.request_id] and ev.token_ids:
                first_cached[ev.request_id] = ev.cached_tokens
            toks[ev.request_id] += ev.token_ids
            if lps is not None:
                lps.setdefault(ev.request_id, []).extend(ev.logprobs or [])
            if ev.finish_reason:
                out[ev.request_id] = (toks[ev.request_id], ev.usage.cached_tokens)
                assert first_cached[ev.request_id] == ev.usage.cached_tokens
    return out


def greedy(n: int) -> SamplingParams:
    """Greedy with the sampled tokens' logprobs: the tiny model's greedy tokens barely depend on the GDN state,
    its logprobs do (a zeroed restore moves them by ~5e-3, a right one by ~1e-6): LP_TOL tells them apart."""
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=0)


LP_TOL = 1e-4


def assert_same_logprobs(a: dict[str, list[float]], b: dict[str, list[float]]) -> None:
    assert a.keys() == b.keys() and all(len(a[k]) == len(b[k]) > 0 for k in a)
    gap = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
    assert gap < LP_TOL, gap


def toks(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 1024) for _ in range(n)]


def soak_turns(core, rng: random.Random, roots: list[list[int]], requests: int, max_len: int,
               check=lambda core: core.prefix.pages.check()) -> int:
    """Multi-turn conversations grown from `roots` (each resent with its answer, restarted past `max_len`), mixed
    sampling, aborts and a full queue, until `requests` are in and every one is done; `check` runs after each step.
    Returns how many finished requests hit the cache."""
    histories = [list(r) for r in roots]
    live: dict[str, int] = {}  # request id -> history index
    outs: dict[str, list[int]] = {}
    submitted = hits = 0
    while submitted < requests or live:
        if submitted < requests and rng.random() < 0.6:
            i = rng.randrange(len(histories))
            h = histories[i]
            if len(h) > max_len:
                h[:] = list(roots[i])
            h += toks(rng, rng.randint(1, 20))
            p = SamplingParams(temperature=rng.choice([0, 0.8]), max_tokens=rng.randint(1, 12), seed=submitted,
                               ignore_eos=True)  # fmt: skip
            rid = f"s{submitted}"
            try:
                core.add(GenerationRequest(rid, list(h), p))
                live[rid], outs[rid] = i, []
                submitted += 1
            except QueueFullError:
                pass
        if live and rng.random() < 0.05:
            core.abort(rng.choice(sorted(live)))
        for ev in core.step():
            outs[ev.request_id] += ev.token_ids
            if ev.finish_reason:
                i = live.pop(ev.request_id)
                hits += ev.usage.cached_tokens > 0
                if ev.finish_reason != "abort" and rng.random() < 0.7:
                    histories[i] += outs[ev.request_id]  # the next turn resends the answer
        check(core)
    return hits


def assert_clean(core) -> None:
    """Nothing in use, every pool back to full after a clear; the index's invariants hold."""
    assert not core.has_work
    core.clear_prefix_cache()
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.lanes_busy) == (st.pages_total, st.slots_total, 0)
    pages, ck = core.prefix.pages, core.prefix.checkpoints
    pages.check()
    ck.check()
    assert pages.num_in_use == 0 and pages.num_cached == 0 and len(ck) == 0 and ck.num_pinned == 0


def test_turns_hit_the_cache_and_match_cache_off(make_engine_core):
    rng = random.Random(1)
    on, off = make_engine_core(max_concurrency=2), make_engine_core(max_concurrency=2, prefix_cache=False)
    assert off.prefix is None and on.prefix is not None
    history: list[int] = toks(rng, 45)
    cached = []
    for turn in range(4):
        prompt = history + toks(rng, 7)
        req = [GenerationRequest(f"t{turn}", prompt, greedy(20))]
        lp_on, lp_off = {}, {}
        (a, c), = run_all(on, req, lp_on).values()
        (b, c_off), = run_all(off, req, lp_off).values()
        assert a == b and c_off == 0
        assert_same_logprobs(lp_on, lp_off)
        cached.append(c)
        history = prompt + a
    # turn 1 saved the state at its answer's last page boundary: 52 prompt + 19 run = 71 -> 64
    assert cached[0] == 0 and cached[1] == 64 and all(c > 0 and c % PS == 0 for c in cached[1:])
    st = on.stats().extra
    assert st["prefix_hit_tokens"] == sum(cached) and 0 < st["prefix_hit_rate"] < 1
    assert_clean(on)


def test_same_prompt_again_backs_off_a_page(make_engine_core):
    rng = random.Random(2)
    on, off = make_engine_core(), make_engine_core(prefix_cache=False)
    for n in (48, 40):  # ends on a page boundary, and not
        prompt = toks(rng, n)
        first = run_all(on, [GenerationRequest(f"a{n}", prompt, greedy(5))])[f"a{n}"]
        again = run_all(on, [GenerationRequest(f"b{n}", prompt, greedy(5))])[f"b{n}"]
        ref = run_all(off, [GenerationRequest(f"c{n}", prompt, greedy(5))])[f"c{n}"]
        assert first[0] == again[0] == ref[0]
        assert again[1] == (n - 1) // PS * PS  # the last token is always computed
    assert_clean(on)


def test_a_checkpoint_inside_a_chunk_costs_no_step(make_engine_core):
    """The GDN state at a prompt's last page boundary is saved during the step that crosses it: a prompt that fits
    one chunk runs in one step, and resending it resumes from that boundary with cache-off output."""
    rng = random.Random(5)
    on, off = make_engine_core(prefill_chunk=64), make_engine_core(prefix_cache=False)
    prompt = toks(rng, 45)  # its last page boundary, 32, falls inside the one chunk
    on.add(GenerationRequest("a", prompt, greedy(1)))
    steps = 0
    while on.has_work:
        on.step()
        steps += 1
    assert steps == 1
    lp_on, lp_off = {}, {}
    again = run_all(on, [GenerationRequest("b", prompt, greedy(6))], lp_on)["b"]
    ref = run_all(off, [GenerationRequest("c", prompt, greedy(6))], lp_off)["c"]
    assert again[1] == 32 and again[0] == ref[0]
    assert_same_logprobs({"x": lp_on["b"]}, {"x": lp_off["c"]})
    assert_clean(on)


def test_a_save_without_a_free_slot_ends_the_chunk_there(make_engine_core):
    """One checkpoint slot, two prompts crossing their last page boundary in the same step: the first saves during
    the step (its slot pinned meanwhile), the second's chunk ends at its boundary and saves after the step, as
    it did before saves inside chunks; the output is cache-off's, and the second's checkpoint is what remains."""
    rng = random.Random(6)
    on = make_engine_core(max_concurrency=2, prefix_cache_slots=1, prefill_chunk=128)
    off = make_engine_core(max_concurrency=2, prefix_cache=False)
    a, b = toks(rng, 45), toks(rng, 45)
    reqs = [GenerationRequest("a", a, greedy(2)), GenerationRequest("b", b, greedy(2))]  # no decode checkpoint
    lp_on, lp_off = {}, {}
    got, want = run_all(on, reqs, lp_on), run_all(off, reqs, lp_off)
    assert {k: t for k, (t, _) in got.items()} == {k: t for k, (t, _) in want.items()}
    assert_same_logprobs(lp_on, lp_off)
    assert run_all(on, [GenerationRequest("b2", b, greedy(2))])["b2"][1] == 32
    assert run_all(on, [GenerationRequest("a2", a, greedy(2))])["a2"][1] == 0
    assert_clean(on)


def test_no_hit_without_an_identical_page_prefix(make_engine_core):
    rng = random.Random(3)
    on = make_engine_core()
    base = toks(rng, 60)
    run_all(on, [GenerationRequest("base", base, greedy(3))])
    other = base.copy()
    other[3] = other[3] % 1023 + 1  # one token differs in the first page: nothing matches
    assert run_all(on, [GenerationRequest("o", other + [5], greedy(3))])["o"][1] == 0
    # shares pages 0-1 with base, but base saved its state only at 48 (its prompt's last page boundary): no
    # checkpoint at 16 or 32, so no hit (KV alone is not enough); p saves one where it leaves base's pages
    assert run_all(on, [GenerationRequest("p", base[:40] + [7] * 30, greedy(3))])["p"][1] == 0
    assert run_all(on, [GenerationRequest("p2", base[:40] + [8] * 30, greedy(3))])["p2"][1] == 32  # p saved it
    assert run_all(on, [GenerationRequest("q", base + [9] * 5, greedy(3))])["q"][1] == 48
    on.clear_prefix_cache()
    assert run_all(on, [GenerationRequest("r", base + [9] * 5, greedy(3))])["r"][1] == 0
    assert_clean(on)


def test_a_shared_head_is_checkpointed_where_prompts_part(make_engine_core):
    rng = random.Random(8)
    on, off = make_engine_core(), make_engine_core(prefix_cache=False)
    head = toks(rng, 40)  # pages 0-1 full, shared; the prompts part in page 2
    reqs = [GenerationRequest(f"h{i}", head + toks(rng, 30), greedy(4)) for i in range(3)]
    got = [run_all(on, [r])[r.request_id] for r in reqs]
    # the first leaves KV only; the second finds 2 cached pages without a checkpoint and saves one at 32
    assert [c for _, c in got] == [0, 0, 32]
    assert [t for t, _ in got] == [run_all(off, [r])[r.request_id][0] for r in reqs]
    assert_clean(on)


def test_clear_requested_from_another_thread_runs_at_the_next_step(make_engine_core):
    core = make_engine_core()
    prompt = list(range(1, 41))
    run_all(core, [GenerationRequest("a", prompt, greedy(3))])
    assert core.prefix.pages.num_cached and len(core.prefix.checkpoints)
    core.request_clear_prefix_cache()  # what Engine.clear_prefix_cache does
    assert core.has_work and core.step() == []
    assert core.prefix.pages.num_cached == 0 and len(core.prefix.checkpoints) == 0
    assert run_all(core, [GenerationRequest("b", prompt, greedy(3))])["b"][1] == 0


def test_eight_concurrent_requests_sharing_prefixes(make_engine_core):
    rng = random.Random(4)
    system = toks(rng, 37)
    kw = dict(max_concurrency=8, prefill_chunk=32)
    on, off = make_engine_core(**kw), make_engine_core(prefix_cache=False, **kw)
    warm = [GenerationRequest("warm", system + toks(rng, 3), greedy(4))]
    waves = [[GenerationRequest(f"w0-{i}", system + toks(rng, rng.randint(1, 30)), greedy(6 + i)) for i in range(8)]]
    assert run_all(on, warm) == run_all(off, warm)
    got, ref = run_all(on, waves[0]), run_all(off, waves[0])
    assert {k: t for k, (t, _) in got.items()} == {k: t for k, (t, _) in ref.items()}
    assert all(c == 32 for _, c in got.values())  # the system prompt's first two pages + checkpoint at 32
    # second turns, all at once: each resumes from its own answer's checkpoint, pages shared with the first
    wave2 = [GenerationRequest(f"w1-{i}", r.prompt_token_ids + got[r.request_id][0] + toks(rng, 4), greedy(5))
             for i, r in enumerate(waves[0])]
    lp_on, lp_off = {}, {}
    a, b = run_all(on, wave2, lp_on), run_all(off, wave2, lp_off)
    assert {k: t for k, (t, _) in a.items()} == {k: t for k, (t, _) in b.items()}
    assert_same_logprobs(lp_on, lp_off)
    assert all(c >= 32 for _, c in a.values()) and sum(c for _, c in a.values()) > 8 * 32
    assert_clean(on)


def test_output_unchanged_under_eviction_churn(make_engine_core):
    """Pools far smaller than the working set: 16 KV pages, 2 checkpoint slots, six growing conversations."""
    rng = random.Random(5)
    kw = dict(max_concurrency=3, kv_capacity=16 * PS, prefill_chunk=32)
    on, off = make_engine_core(prefix_cache_slots=2, **kw), make_engine_core(prefix_cache=False, **kw)
    convs = [toks(rng, rng.randint(20, 50)) for _ in range(6)]
    for rnd in range(12):  # two random conversations' next turns at a time: some resume soon, most not
        reqs = []
        for i in rng.sample(range(6), 2):
            h = convs[i]
            if len(h) > 150:
                h[:] = toks(rng, 30)
            h += toks(rng, rng.randint(1, 9))
            reqs.append((i, GenerationRequest(f"c{i}-{rnd}", list(h), greedy(rng.randint(3, 12)))))
        lp_on, lp_off = {}, {}
        a, b = run_all(on, [r for _, r in reqs], lp_on), run_all(off, [r for _, r in reqs], lp_off)
        assert {k: t for k, (t, _) in a.items()} == {k: t for k, (t, _) in b.items()}
        assert_same_logprobs(lp_on, lp_off)
        for i, r in reqs:
            convs[i] += a[r.request_id][0]
        on.prefix.pages.check()
        on.prefix.checkpoints.check()
    st = on.stats().extra
    assert st["prefix_evicted_pages"] > 0 and st["prefix_evicted_checkpoints"] > 0 and st["prefix_hit_tokens"] > 0
    assert_clean(on)


def test_soak_shared_prefixes_leaks_nothing(make_engine_core):
    rng = random.Random(6)
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=32, kv_capacity=40 * PS,
                            prefix_cache_slots=5)
    st0 = core.stats()
    roots = [toks(rng, rng.randint(10, 70)) for _ in range(5)]
    hits = soak_turns(core, rng, roots, requests=300, max_len=300)
    assert hits > 50
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.queue_depth) == (st0.pages_free, st0.slots_free, 0)
    assert_clean(core)


def test_checkpoint_slots_default_and_off():
    from hinfer.config import EngineConfig

    assert EngineConfig(max_concurrency=3).checkpoint_slots == 6  # the default: 2 per lane
    assert EngineConfig(max_concurrency=3, spec="mtp").checkpoint_slots == 6  # speculation keeps the cache
    assert EngineConfig(prefix_cache=False).checkpoint_slots == 0
    assert EngineConfig(prefix_cache_slots=0).checkpoint_slots == 0


def test_checkpoints_in_the_memory_plan_and_flags(tiny_model, fixtures_dir):
    from hinfer.cli.engine_args import engine_config_from_args
    from hinfer.cli.main import build_parser
    from hinfer.config import EngineConfig, load_model_config
    from hinfer.engine.factory import state_shape
    from hinfer.engine.memory_plan import gdn_slot_bytes, plan_memory

    def parse(*flags: str) -> EngineConfig:
        return engine_config_from_args(build_parser().parse_args(["plan", "x", *flags]))

    assert parse("--prefix-cache-slots", "5").checkpoint_slots == 5 and parse().prefix_cache
    assert not parse("--no-prefix-cache").prefix_cache

    def rows(plan) -> dict[str, int]:
        return {r.name: r.bytes for r in plan.rows}

    cfg, _ = tiny_model
    ecfg = EngineConfig(device="cpu", dtype="fp32", max_concurrency=2, max_context=256, page_size=16,
                        prefix_cache_slots=3)
    plan = plan_memory(cfg, ecfg, weights="bf16", device_bytes=2**33, device_name="test", device="cpu")
    assert plan.checkpoint_slots == 3 and rows(plan)["prefix checkpoints"] == 3 * gdn_slot_bytes(cfg, "fp32")
    assert state_shape(cfg, ecfg, plan).checkpoint_bytes(cfg) == rows(plan)["prefix checkpoints"]
    assert "prefix-cache 3 slots" in plan.table()
    off = plan_memory(cfg, EngineConfig(device="cpu", max_concurrency=2, max_context=256, prefix_cache=False),
                      weights="bf16", device_bytes=2**33, device_name="t")
    assert rows(off)["prefix checkpoints"] == 0 and "prefix-cache off" in off.table()

    # the default: 2 per lane, at most a tenth of the KV bytes (27B: 147 MiB a slot)
    big = load_model_config(fixtures_dir / "qwen3.6-27b")
    slot = gdn_slot_bytes(big, "bf16")
    p80 = plan_memory(big, EngineConfig(), weights="bf16", device_bytes=80 * 10**9, device_name="t", device="cuda")
    assert p80.checkpoint_slots == 16 and rows(p80)["prefix checkpoints"] == 16 * slot
    short = plan_memory(big, EngineConfig(max_context=4096, max_concurrency=2), weights="bf16",
                        device_bytes=80 * 10**9, device_name="t", device="cuda")
    assert short.checkpoint_slots == 1  # 512 MiB of KV: one slot
    auto = plan_memory(big, EngineConfig(kv_capacity=0), weights="bf16", device_bytes=60 * 10**9,
                       device_name="t", device="cuda")
    kv = rows(auto)["kv cache"]
    assert 1 <= auto.checkpoint_slots < 16 and auto.checkpoint_slots * slot <= (kv + rows(auto)["prefix checkpoints"])


def test_llm_generate_uses_the_cache():
    from pathlib import Path

    from hinfer import LLM

    art = Path(__file__).resolve().parents[1] / "fixtures" / "artifact-v1.hinfer"
    kw = dict(device="cpu", max_concurrency=2, page_size=16, max_context=256)
    on, off = LLM(str(art), **kw), LLM(str(art), prefix_cache=False, **kw)
    rng = random.Random(7)
    prompt = [rng.randrange(1, 250) for _ in range(40)]
    first = on.generate(prompt, greedy(8))[0]
    turn2 = prompt + first.token_ids + [5, 6, 7]
    a, b = on.generate(turn2, greedy(8))[0], off.generate(turn2, greedy(8))[0]
    assert a.token_ids == b.token_ids and a.cached_tokens == 32 and b.cached_tokens == 0
    on.clear_prefix_cache()
    assert on.generate(turn2, greedy(8))[0].cached_tokens == 0


def test_a_conversation_resent_without_its_last_turn_resumes_where_that_turn_began(make_engine_core):
    """The turn before the answer's (an instruction the server put there, an edited last message) is checkpointed
    where it begins: the next request that resends the conversation without it resumes there, with the same
    tokens and logprobs as computing it all."""
    rng = random.Random(12)
    on, off = make_engine_core(), make_engine_core(prefix_cache=False)
    turn = on.prefix.turn_start = 1000  # the tiny model's vocabulary has no <|im_start|>: a stand-in opener
    words = lambda n: [rng.randrange(1, 1000) for _ in range(n)]  # noqa: E731
    conversation = [turn, *words(47)]  # three full pages
    first = GenerationRequest("a", conversation + [turn, *words(20), turn, *words(3)], greedy(3))
    assert run_all(on, [first])["a"][1] == 0
    again = GenerationRequest("b", conversation + [turn, *words(30)], greedy(4))
    lps_on, lps_off = {}, {}
    got = run_all(on, [again], lps_on)["b"]
    assert got[1] == 48  # without the last turn's checkpoint: 0 (the first prompt's others sit at 64)
    assert got[0] == run_all(off, [again], lps_off)["b"][0]
    assert_same_logprobs(lps_on, lps_off)
    assert_clean(on)
