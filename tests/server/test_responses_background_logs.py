"""BackgroundResponses' bounds on the event logs it keeps after their responses ended, and EventLog's readers."""

from __future__ import annotations

import asyncio

from hinfer.server import responses_background as rb


def _run(coro):
    return asyncio.run(coro)


def test_ended_logs_are_bounded_by_count_and_events(monkeypatch):
    monkeypatch.setattr(rb, "KEPT_LOGS", 3)
    monkeypatch.setattr(rb, "KEPT_EVENTS", 10)

    async def main():
        bg = rb.BackgroundResponses()

        async def work(log: rb.EventLog, n: int) -> None:
            log.add([{"type": "e", "sequence_number": i} for i in range(n)])

        for i, n in enumerate([2, 2, 2, 2]):
            log = rb.EventLog()
            bg.start(f"r{i}", work(log, n), log)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert [rid for rid in ("r0", "r1", "r2", "r3") if bg.events(rid)] == ["r1", "r2", "r3"]  # the count
        big = rb.EventLog()
        bg.start("big", work(big, 9), big)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [rid for rid in ("r1", "r2", "r3", "big") if bg.events(rid)] == ["big"]  # 9 + 2 > 10 events
        assert not bg.running("big") and len(bg) == 0

    _run(main())


def test_a_reader_follows_from_any_point_to_the_close():
    async def main():
        log = rb.EventLog()
        got: list[int] = []

        async def read(after: int) -> None:
            async for e in log.follow(after):
                got.append(e["sequence_number"])

        reader = asyncio.create_task(read(1))
        log.add([{"sequence_number": 0}, {"sequence_number": 1}])
        await asyncio.sleep(0)
        log.add([{"sequence_number": 2}])
        log.add([])
        log.add([{"sequence_number": 3}])
        log.close()
        await reader
        assert got == [2, 3]

    _run(main())
