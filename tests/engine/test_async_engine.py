"""The async Engine: streams events from its thread, maps timeouts, frees the lane when a consumer leaves."""

from __future__ import annotations

import asyncio

import pytest

from hinfer.engine.engine import Engine
from hinfer.engine.protocol import GenerationRequest, QueueFullError, QueueTimeoutError
from hinfer.sampling_params import SamplingParams


def test_stream_abort_and_errors(make_engine_core):
    async def main():
        eng = Engine(make_engine_core(max_concurrency=1, max_pending_requests=1, pending_timeout_ms=200), "tiny")
        await eng.start()
        try:
            evs = [e async for e in eng.generate(GenerationRequest("a", [3, 4, 5], SamplingParams(max_tokens=5, ignore_eos=True)))]
            assert evs[-1].finish_reason == "length" and sum(len(e.token_ids) for e in evs) == 5
            assert evs[-1].usage.completion_tokens == 5 and evs[-1].timings is not None

            # a consumer that leaves early frees its lane at the next step
            gen = eng.generate(GenerationRequest("b", [3], SamplingParams(max_tokens=10_000, ignore_eos=True)))
            await gen.__anext__()
            await gen.aclose()
            for _ in range(200):
                if eng.stats().lanes_busy == 0:
                    break
                await asyncio.sleep(0.01)
            st = eng.stats()
            assert st.lanes_busy == 0 and st.pages_free == st.pages_total

            # lane busy + queue of one: the third request is refused, the queued one times out
            long = eng.generate(GenerationRequest("c", [3], SamplingParams(max_tokens=10_000, ignore_eos=True)))
            await long.__anext__()
            queued = eng.generate(GenerationRequest("d", [3], SamplingParams(max_tokens=2)))
            task = asyncio.create_task(queued.__anext__())
            await asyncio.sleep(0.05)
            with pytest.raises(QueueFullError):
                await eng.generate(GenerationRequest("e", [3], SamplingParams(max_tokens=2))).__anext__()
            with pytest.raises(QueueTimeoutError):
                await task
            await long.aclose()
        finally:
            await eng.stop()

    asyncio.run(main())
