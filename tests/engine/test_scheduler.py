"""Scheduler logic: admission with page reservation, FIFO, chunked prefill budget, queue limits, freeing."""

from __future__ import annotations

import pytest

from hinfer.engine.protocol import QueueFullError
from hinfer.engine.scheduler import Scheduler
from hinfer.engine.sequence import Sequence
from hinfer.sampling_params import SamplingParams


def make(**kw) -> Scheduler:
    args = dict(max_concurrency=2, max_pending=2, pending_timeout_s=10.0, prefill_chunk=8, page_size=4,
                num_pages=1 + 16, num_slots=1 + 2, max_context=64)
    args.update(kw)
    return Scheduler(**args)


def seq(rid: str, n_prompt: int, max_tokens: int = 4) -> Sequence:
    return Sequence(rid, list(range(1, n_prompt + 1)), SamplingParams(max_tokens=max_tokens), seed=0)


def test_admission_reserves_prompt_plus_max_tokens_and_frees_everything():
    s = make()
    a, b = seq("a", 10, 6), seq("b", 3, 1)
    s.add(a)
    s.add(b)
    assert s.admit() == [a, b]
    assert len(a.pages) == 4 and len(b.pages) == 1  # ceil(16/4), ceil(4/4)
    assert s.pages.num_free == 16 - 5 and s.slots.num_free == 0
    s.finish(a)
    s.finish(b)
    assert s.pages.num_free == 16 and s.slots.num_free == 2 and not s.running


def test_chunked_prefill_budget_and_decode_first():
    s = make(prefill_chunk=8)
    a, b = seq("a", 20), seq("b", 5)
    s.add(a)
    s.add(b)
    s.admit()
    plan = s.schedule()
    assert [(c.seq.request_id, c.num_tokens, c.samples) for c in plan] == [("a", 8, False)]
    a.num_cached = 16
    plan = s.schedule()
    assert [(c.seq.request_id, c.num_tokens, c.samples) for c in plan] == [("a", 4, True), ("b", 4, False)]
    a.num_cached, a.output_ids, b.num_cached = 20, [7], 4
    plan = s.schedule()
    assert [(c.seq.request_id, c.num_tokens, c.samples) for c in plan] == [("a", 1, True), ("b", 1, True)]


def test_queue_full_and_timeout_are_distinct():
    s = make(max_concurrency=1, max_pending=1)
    s.add(seq("a", 2))
    s.add(seq("b", 2))  # one free lane + one pending slot
    with pytest.raises(QueueFullError):
        s.add(seq("c", 2))
    s.admit()
    expired = s.expire(now=1e12)
    assert [x.request_id for x in expired] == ["b"] and expired[0].finish_reason == "timeout"


def test_fifo_head_waits_for_pages():
    s = make(num_pages=1 + 4, max_concurrency=3)
    big, small = seq("big", 12, 4), seq("small", 1, 1)
    s.add(seq("first", 7, 1))  # 2 pages
    s.add(big)  # needs 4 pages: must wait
    s.add(small)  # would fit, but may not overtake the head
    assert [x.request_id for x in s.admit()] == ["first"]
    s.finish(s.running[0])
    assert [x.request_id for x in s.admit()] == ["big"]
