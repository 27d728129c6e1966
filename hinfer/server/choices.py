"""Several engine runs answering one request (`n > 1`, a list of prompts): started together, finished together,
their streams merged as events arrive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from hinfer.engine.protocol import TokenEvent
from hinfer.server.errors import bad_request
from hinfer.server.generation import EngineRun, run_to_end
from hinfer.server.prompt import normalize_seed

MAX_CHOICES = 16  # n times the number of prompts: each choice is a lane of its own


def check_choices(n: int | None, prompts: int = 1, param: str = "n") -> int:
    n = 1 if n is None else n
    if n < 1:
        raise bad_request("n must be at least 1", param=param)
    if n * prompts > MAX_CHOICES:
        raise bad_request(f"n times the number of prompts is {n * prompts}; at most {MAX_CHOICES} choices per "
                          "request", param=param)
    return n


def choice_seed(seed: int | None, j: int) -> int | None:
    """Choice j of a seeded request samples with seed + j: reproducible, and the samples differ."""
    return None if seed is None else normalize_seed(seed + j)


async def start_all(runs: list[EngineRun]) -> None:
    """Start every run; if one is refused, close the others and raise its error."""
    results = await asyncio.gather(*(r.start() for r in runs), return_exceptions=True)
    errors = [e for e in results if isinstance(e, BaseException)]
    if errors:
        await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)
        raise errors[0]


async def run_all_to_end(runs: list[EngineRun], feeds: list[Callable[[TokenEvent], object]]) -> None:
    try:
        await asyncio.gather(*(run_to_end(r, f) for r, f in zip(runs, feeds)))
    finally:
        await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)


async def merged_events(runs: list[EngineRun]) -> AsyncIterator[tuple[int, TokenEvent]]:
    """(choice index, event) in arrival order; an engine failure in any run is raised here."""
    queue: asyncio.Queue[tuple[int, TokenEvent | None, BaseException | None]] = asyncio.Queue()

    async def pump(i: int, run: EngineRun) -> None:
        try:
            async for ev in run.events():
                await queue.put((i, ev, None))
            await queue.put((i, None, None))
        except Exception as e:
            await queue.put((i, None, e))

    tasks = [asyncio.create_task(pump(i, r)) for i, r in enumerate(runs)]
    try:
        left = len(runs)
        while left:
            i, ev, err = await queue.get()
            if err is not None:
                raise err
            if ev is None:
                left -= 1
                continue
            yield i, ev
    finally:
        for t in tasks:
            t.cancel()


async def close_all(runs: list[EngineRun]) -> None:
    await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)

