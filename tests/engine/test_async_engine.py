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


def test_grammars_compile_off_the_engine_thread(make_engine_core):
    """A structured request's grammar is compiled in a worker thread: while its compile is held, another lane
    runs to the end (a compile on the engine thread would stall it, and this test would time out); the engine
    thread only makes the matcher. A grammar that cannot be built is a ValueError from the first __anext__."""
    import threading

    from hinfer.sampling_params import StructuredOutput

    async def main():
        core = make_engine_core(max_concurrency=2)
        eng = Engine(core, "tiny")
        await eng.start()
        grammars = core.grammars
        real, release, threads = grammars.compile, threading.Event(), []

        def held_compile(so):
            threads.append(threading.current_thread().name)
            assert release.wait(30)
            return real(so)

        grammars.compile = held_compile
        try:
            so = StructuredOutput(regex=r"[0-9]{3}")
            held = asyncio.create_task(_collect(eng.generate(
                GenerationRequest("held", [3, 4], SamplingParams(temperature=0, max_tokens=10, structured=so)))))
            free = await asyncio.wait_for(_collect(eng.generate(
                GenerationRequest("free", [3], SamplingParams(max_tokens=8, ignore_eos=True)))), 30)
            assert free[-1].finish_reason == "length" and not held.done()
            release.set()
            evs = await asyncio.wait_for(held, 30)
            assert core.tokenizer.decode([t for e in evs for t in e.token_ids]).isdigit()
            assert threads and all(t.startswith("hinfer-grammar") for t in threads)
            with pytest.raises(ValueError):
                await eng.generate(GenerationRequest("bad", [3], SamplingParams(
                    max_tokens=2, structured=StructuredOutput(regex="(")))).__anext__()
            st = eng.stats()
            assert st.lanes_busy == 0 and st.pages_free == st.pages_total
        finally:
            release.set()
            await eng.stop()

    asyncio.run(main())


async def _collect(gen):
    return [e async for e in gen]


def test_grammar_compiles_are_bounded_like_the_queue(make_engine_core):
    """Requests waiting for their grammar count against lanes + queue: past them the next is refused at once
    (QueueFullError, the server's 429) instead of piling up compiles; a finished compile frees its place."""
    import threading

    from hinfer.sampling_params import StructuredOutput

    async def main():
        core = make_engine_core(max_concurrency=1, max_pending_requests=1)
        eng = Engine(core, "tiny")
        await eng.start()
        real, release = core.grammars.compile, threading.Event()
        core.grammars.compile = lambda so: release.wait(30) and real(so)

        def req(i):
            so = StructuredOutput(regex=r"[0-9]{2}")
            return GenerationRequest(f"g{i}", [3, 4], SamplingParams(temperature=0, max_tokens=4, structured=so))

        try:
            held = [asyncio.create_task(_collect(eng.generate(req(i)))) for i in range(2)]
            await asyncio.sleep(0.2)
            with pytest.raises(QueueFullError, match="grammars compiling"):
                await eng.generate(req(2)).__anext__()
            release.set()
            for t in held:
                assert (await asyncio.wait_for(t, 30))[-1].finish_reason is not None
            assert (await asyncio.wait_for(_collect(eng.generate(req(3))), 30))[-1].finish_reason is not None
        finally:
            release.set()
            await eng.stop()

    asyncio.run(main())
