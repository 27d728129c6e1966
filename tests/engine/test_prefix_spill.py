"""Host-RAM spill of GDN checkpoints: a checkpoint evicted from the device slots is copied to a host row and a
later hit restores it from there. Greedy output equals a cache-off engine when almost every hit comes from host,
and a soak with aborts and host evictions leaks no page, slot, checkpoint, host row or reference.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_prefix_cache import PS, assert_clean, greedy, run_all, soak_turns, toks  # the same engine helpers

from hinfer.engine.host_tier import HostTier, tier_tensors
from hinfer.engine.memory_plan import gdn_slot_bytes
from hinfer.engine.protocol import GenerationRequest
from hinfer.model.state import ModelState, StateShape
from hinfer.sampling_params import SamplingParams


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def greedy_lp(n: int) -> SamplingParams:
    """Greedy with the sampled tokens' logprobs: the tiny model's greedy tokens barely depend on the GDN state
    (zeroing a restored state changes none of them), its logprobs do (by ~5e-3; a right restore: ~1e-6)."""
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=0)


def run_lp(core, reqs: list[GenerationRequest]) -> dict[str, tuple[list[int], list[float]]]:
    """-> request id: (tokens, their logprobs)."""
    for r in reqs:
        core.add(r)
    out: dict[str, tuple[list[int], list[float]]] = {r.request_id: ([], []) for r in reqs}
    done: set[str] = set()
    while len(done) < len(reqs):
        for ev in core.step():
            out[ev.request_id][0].extend(ev.token_ids)
            out[ev.request_id][1].extend(ev.logprobs)
            if ev.finish_reason:
                done.add(ev.request_id)
    return out


def lp_gap(a: dict, b: dict) -> float:
    """Largest logprob difference between two runs of the same requests (their tokens must be equal)."""
    assert {k: t for k, (t, _) in a.items()} == {k: t for k, (t, _) in b.items()}
    return max(abs(x - y) for k in a for x, y in zip(a[k][1], b[k][1]))


def host_bytes(tiny_model, rows: int) -> int:
    return rows * gdn_slot_bytes(tiny_model[0], "fp32")


def assert_host_clean(core) -> None:
    host = core.prefix.host
    host.check()
    assert len(host) == 0 and host.index.num_pinned == 0


def test_spill_and_restore_round_trip(tiny_model):
    cfg, _ = tiny_model
    shape = StateShape(num_pages=4, page_size=PS, num_slots=3, kv_dtype=torch.float32, dtype=torch.float32,
                       checkpoint_slots=2)
    st = ModelState(cfg, shape, "cpu")
    st.conv_state.normal_()
    st.ssm_state.normal_()
    host = HostTier(*tier_tensors(st, "checkpoints"), 2)
    assert not host.pinned and host.nbytes == 2 * gdn_slot_bytes(cfg, "fp32")
    want = [(st.conv_state[:, s].clone(), st.ssm_state[:, s].clone()) for s in (3, 4)]
    host.spill(b"a", 3)
    host.spill(b"b", 4)
    host.spill(b"a", 4)  # on the host already: a use, no copy
    assert host.spills == 2 and len(host) == 2
    st.reset_slots([1, 2, 3, 4])
    host.pin(b"a")
    host.pin(b"b")
    host.restore([b"a", b"b"], [2, 1])
    host.unpin(b"a")
    host.unpin(b"b")
    assert torch.equal(st.conv_state[:, 2], want[0][0]) and torch.equal(st.ssm_state[:, 2], want[0][1])
    assert torch.equal(st.conv_state[:, 1], want[1][0]) and torch.equal(st.ssm_state[:, 1], want[1][1])
    host.spill(b"c", 3)  # full: the least recently used row ("a": restored before "b") goes
    assert b"a" not in host and b"b" in host and host.evictions == 1 and host.restores == 2
    host.clear()
    host.check()
    assert len(host) == 0


def test_hits_from_host_match_cache_off_under_concurrency(make_engine_core, tiny_model):
    """One device checkpoint slot, eight conversations in flight: nearly every resumed turn finds its checkpoint
    spilled to host."""
    rng = random.Random(11)
    kw = dict(max_concurrency=8, prefill_chunk=32)
    on = make_engine_core(prefix_cache_slots=1, host_cache_bytes=host_bytes(tiny_model, 64), **kw)
    off = make_engine_core(prefix_cache=False, **kw)
    assert on.prefix.host is not None and on.prefix.checkpoints.capacity == 1
    convs = [toks(rng, rng.randint(20, 60)) for _ in range(8)]
    cached_turns = 0
    for turn in range(3):
        reqs = []
        for i, h in enumerate(convs):
            h += toks(rng, rng.randint(1, 12))
            reqs.append(GenerationRequest(f"c{i}-{turn}", list(h), greedy(rng.randint(4, 12))))
        a, b = run_all(on, reqs), run_all(off, reqs)
        assert {k: t for k, (t, _) in a.items()} == {k: t for k, (t, _) in b.items()}
        for i, r in enumerate(reqs):
            convs[i] += a[r.request_id][0]
        cached_turns += sum(c > 0 for _, c in a.values())
        lp = [GenerationRequest(r.request_id + "-lp", r.prompt_token_ids, greedy_lp(4)) for r in reqs]
        assert lp_gap(run_lp(on, lp), run_lp(off, lp)) < 1e-4  # the restored state is the computed one
        on.prefix.pages.check()
        on.prefix.checkpoints.check()
        on.prefix.host.check()
    st = on.stats().extra
    assert st["prefix_host_restores"] >= 8 and st["prefix_host_spills"] > 0
    assert cached_turns >= 16 and st["prefix_hit_tokens"] > 0
    assert st["prefix_host_checkpoint_slots"] == 64 and st["prefix_host_evictions"] == 0
    assert_clean(on)
    assert_host_clean(on)


def test_a_wrong_host_restore_would_be_caught(make_engine_core, tiny_model, monkeypatch):
    """The logprob check above is sensitive to the restored state: zeroing it instead is caught."""
    rng = random.Random(11)
    kw = dict(max_concurrency=8, prefill_chunk=32)
    on = make_engine_core(prefix_cache_slots=1, host_cache_bytes=host_bytes(tiny_model, 64), **kw)
    monkeypatch.setattr(on.prefix.host, "restore", lambda names, slots: on.prefix.state.reset_slots(slots))
    off = make_engine_core(prefix_cache=False, **kw)
    convs = [toks(rng, rng.randint(20, 60)) for _ in range(8)]
    gaps = []
    for turn in range(2):
        reqs = [GenerationRequest(f"c{i}-{turn}", h + toks(rng, 5), greedy_lp(8)) for i, h in enumerate(convs)]
        a, b = run_lp(on, reqs), run_lp(off, reqs)
        gaps.append(lp_gap(a, b))
        for i, r in enumerate(reqs):
            convs[i] = r.prompt_token_ids + b[r.request_id][0]
    assert gaps[0] < 1e-4 and gaps[1] > 1e-3  # turn 1 resumed from (sabotaged) host rows


def test_without_a_host_tier_the_same_workload_misses(make_engine_core):
    """The control for the test above: one device slot and no host rows, so turns rarely find a checkpoint."""
    rng = random.Random(11)
    on = make_engine_core(prefix_cache_slots=1, host_cache_bytes=0, max_concurrency=8, prefill_chunk=32)
    assert on.prefix.host is None and "prefix_host_restores" not in on.stats().extra
    convs = [toks(rng, rng.randint(20, 60)) for _ in range(8)]
    hits = 0
    for turn in range(2):
        reqs = [GenerationRequest(f"c{i}-{turn}", h + toks(rng, 5), greedy(6)) for i, h in enumerate(convs)]
        out = run_all(on, reqs)
        hits += sum(c > 0 for _, c in out.values())
        for i, r in enumerate(reqs):
            convs[i] = r.prompt_token_ids + out[r.request_id][0]
    assert hits <= 2
    assert_clean(on)


def test_soak_with_host_evictions_and_aborts_leaks_nothing(make_engine_core, tiny_model):
    rng = random.Random(12)
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=32, kv_capacity=48 * PS,
                            prefix_cache_slots=2, host_cache_bytes=host_bytes(tiny_model, 4))
    st0 = core.stats()
    roots = [toks(rng, rng.randint(10, 70)) for _ in range(6)]
    def check_pools(core) -> None:
        core.prefix.pages.check()
        core.prefix.checkpoints.check()
        core.prefix.host.check()

    hits = soak_turns(core, rng, roots, requests=300, max_len=300, check=check_pools)
    st = core.stats()
    extra = st.extra
    assert hits > 50 and extra["prefix_host_restores"] > 10 and extra["prefix_host_evictions"] > 0
    assert core.prefix.host.index.num_pinned == 0 and core.prefix.checkpoints.num_pinned == 0
    assert (st.pages_free, st.slots_free, st.queue_depth) == (st0.pages_free, st0.slots_free, 0)
    assert_clean(core)
    assert_host_clean(core)


def test_host_rows_in_the_plan_and_flags(tiny_model, fixtures_dir):
    from hinfer.cli.engine_args import engine_config_from_args
    from hinfer.cli.main import build_parser
    from hinfer.config import EngineConfig, load_model_config
    from hinfer.engine.factory import state_shape
    from hinfer.engine.memory_plan import host_checkpoint_rows, plan_memory

    def parse(*flags: str) -> EngineConfig:
        return engine_config_from_args(build_parser().parse_args(["plan", "x", *flags]))

    assert parse("--host-cache-gib", "1.5").host_cache_bytes == 3 * 2**29 and parse().host_cache_bytes is None
    cfg, _ = tiny_model
    slot = gdn_slot_bytes(cfg, "fp32")
    ecfg = EngineConfig(device="cpu", dtype="fp32", max_concurrency=2, max_context=256, page_size=16,
                        prefix_cache_slots=3, host_cache_bytes=5 * slot + 1)
    plan = plan_memory(cfg, ecfg, weights="bf16", device_bytes=2**33, device_name="test", device="cpu")
    assert plan.host_checkpoints == 5 and plan.host_rows[0].bytes == 5 * slot
    assert state_shape(cfg, ecfg, plan).host_checkpoints == 5
    assert "host checkpoints" in plan.table() and "5 spilled GDN checkpoints" in plan.table()
    assert plan.total == sum(r.bytes for r in plan.rows)  # host RAM is not device memory
    # defaults: none on the CPU, 4 GiB on CUDA (27B: 147 MiB a checkpoint), none without the prefix cache
    assert host_checkpoint_rows(EngineConfig(), 4, slot, "cpu") == 0
    assert host_checkpoint_rows(EngineConfig(host_cache_bytes=2**30), 0, slot, "cuda") == 0
    big = gdn_slot_bytes(load_model_config(fixtures_dir / "qwen3.6-27b"), "bf16")
    assert host_checkpoint_rows(EngineConfig(host_cache_bytes=4 * 2**30), 16, big, "cuda") == 27
