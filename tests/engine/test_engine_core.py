"""EngineCore: concurrency never changes results; pool accounting is exact; errors are distinct."""

from __future__ import annotations

import random

import pytest

from hinfer.engine.protocol import GenerationRequest, QueueFullError, RequestTooLargeError
from hinfer.sampling_params import SamplingParams


def run_all(core, reqs: list[GenerationRequest]) -> dict[str, list[int]]:
    for r in reqs:
        core.add(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    done: set[str] = set()
    while len(done) < len(reqs):
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
            if ev.finish_reason:
                done.add(ev.request_id)
    return out


def prompts(rng: random.Random, n: int) -> list[list[int]]:
    return [[rng.randrange(1, 1024) for _ in range(rng.choice([1, 3, 17, 40, 75]))] for _ in range(n)]


def params(i: int) -> SamplingParams:
    if i % 3 == 0:
        return SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    return SamplingParams(temperature=0.9, top_p=0.9, top_k=50, seed=100 + i, max_tokens=10 + i % 4,
                          presence_penalty=0.3 * (i % 2), ignore_eos=True)  # fmt: skip


def test_concurrent_equals_alone_with_chunked_prefill(make_engine_core):
    rng = random.Random()
    ps = prompts(rng, 6)
    alone = {}
    core = make_engine_core(max_concurrency=1, prefill_chunk=2048)
    for i, p in enumerate(ps):
        alone.update(run_all(core, [GenerationRequest(f"r{i}", p, params(i))]))
    # a small prefill chunk forces long prompts to be split and mixed with other lanes' decode steps
    core = make_engine_core(max_concurrency=4, prefill_chunk=16)
    together = run_all(core, [GenerationRequest(f"r{i}", p, params(i)) for i, p in enumerate(ps)])
    assert together == alone
    st = core.stats()
    assert st.pages_free == st.pages_total and st.slots_free == st.slots_total and st.lanes_busy == 0


def test_queue_full_and_too_large_are_clear_errors(make_engine_core):
    core = make_engine_core(max_concurrency=1, max_pending_requests=1)
    core.add(GenerationRequest("a", [1, 2], SamplingParams(max_tokens=2)))
    core.add(GenerationRequest("b", [1, 2], SamplingParams(max_tokens=2)))
    with pytest.raises(QueueFullError):
        core.add(GenerationRequest("c", [1, 2], SamplingParams(max_tokens=2)))
    with pytest.raises(RequestTooLargeError):
        core.add(GenerationRequest("d", list(range(1, 600)), SamplingParams(max_tokens=2)))


def test_queue_timeout_event(make_engine_core):
    core = make_engine_core(max_concurrency=1, pending_timeout_ms=0)
    core.add(GenerationRequest("a", [5], SamplingParams(max_tokens=50, ignore_eos=True)))
    core.step()  # a admitted
    core.add(GenerationRequest("b", [5], SamplingParams(max_tokens=2)))
    evs = core.step()
    assert any(e.request_id == "b" and e.finish_reason == "timeout" for e in evs)


def test_soak_random_cancellations_leak_nothing(make_engine_core):
    rng = random.Random()
    core = make_engine_core(max_concurrency=4, max_pending_requests=8, prefill_chunk=32, kv_capacity=512)
    st0 = core.stats()
    live: set[str] = set()
    submitted = 0
    for _ in range(5000):
        if submitted < 500 and rng.random() < 0.5:
            rid = f"s{submitted}"
            submitted += 1
            n = rng.randint(1, 60)
            try:
                core.add(GenerationRequest(rid, [rng.randrange(1, 1024) for _ in range(n)],
                                           SamplingParams(temperature=rng.choice([0, 1]), max_tokens=rng.randint(1, 8))))
                live.add(rid)
            except QueueFullError:
                pass
        if live and rng.random() < 0.2:
            core.abort(rng.choice(sorted(live)))
        for ev in core.step():
            if ev.finish_reason:
                live.discard(ev.request_id)
        if submitted >= 500 and not live:
            break
    while core.has_work:
        for ev in core.step():
            live.discard(ev.request_id)
    st = core.stats()
    assert submitted == 500 and not live
    assert (st.pages_free, st.slots_free, st.lanes_busy, st.queue_depth) == (st0.pages_free, st0.slots_free, 0, 0)
