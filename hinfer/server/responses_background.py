"""Background responses (`background: true`): the create request answers as soon as the generation runs, and
the generation goes on without the client.

The POST waits for the first token as any request does (so the engine's refusals, a full queue or a prompt too
long, stay the POST's own 429 / 400), stores the response as `in_progress` and returns it; a task then drives
the run to its end and stores what it ended as: `completed`, `incomplete`, `failed` (with its error) or
`cancelled` (POST /v1/responses/{id}/cancel). GET /v1/responses/{id} reads the stored object at any time.

With `stream: true` as well, the task also writes the response's stream events to an EventLog: the POST streams
it, and GET /v1/responses/{id}?stream=true&starting_after=N streams it again from event N + 1 (a client that lost
its connection picks up where it was); leaving a stream never stops the generation. The logs of the last
KEPT_LOGS ended responses are kept for those reads, fewer where they pass KEPT_EVENTS events together (a long
answer is an event a token).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine
from typing import Any

log = logging.getLogger(__name__)

KEPT_LOGS = 64  # ended responses whose events stay readable
KEPT_EVENTS = 1 << 18  # and their events together at most (a few hundred bytes each)


class EventLog:
    """One background response's stream events in order (an event's sequence_number is its index), appended by
    its task, followed by any number of readers."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = False
        self._wake = asyncio.Event()

    def add(self, events: list[dict[str, Any]]) -> None:
        if events:
            self.events.extend(events)
            self._notify()

    def close(self) -> None:
        self.done = True
        self._notify()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """The events after sequence number `after`, then each as it comes, until the log is closed."""
        i = max(after + 1, 0)
        while True:
            while i < len(self.events):
                yield self.events[i]
                i += 1
            if self.done:
                return
            await self._wake.wait()


class BackgroundResponses:
    """The running background generations by response id (each one task), and the event logs of streamed ones."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}
        self._logs: OrderedDict[str, EventLog] = OrderedDict()

    def start(self, response_id: str, work: Coroutine[Any, Any, None], events: EventLog | None = None) -> None:
        task = asyncio.create_task(work, name=f"background {response_id}")
        self._tasks[response_id] = task
        if events is not None:
            self._logs[response_id] = events
        task.add_done_callback(lambda t: self._done(response_id, t))

    def running(self, response_id: str) -> bool:
        return response_id in self._tasks

    def events(self, response_id: str) -> EventLog | None:
        return self._logs.get(response_id)

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel(self, response_id: str) -> bool:
        """Cancel a running generation and wait until it has stored its `cancelled` response; False when none
        runs under that id (it ended, or never was)."""
        task = self._tasks.get(response_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.wait({task})
        return True

    def forget(self, response_id: str) -> None:
        """Drop an ended response's event log (its response was deleted)."""
        self._logs.pop(response_id, None)

    def _trim(self) -> None:
        """Drop the oldest ended logs past KEPT_LOGS of them or KEPT_EVENTS events (the running ones stay)."""
        ended = [rid for rid in self._logs if rid not in self._tasks]
        kept = sum(len(self._logs[rid].events) for rid in ended)
        for i, rid in enumerate(ended):
            if len(ended) - i <= KEPT_LOGS and kept <= KEPT_EVENTS:
                break
            kept -= len(self._logs.pop(rid).events)

    def _done(self, response_id: str, task: asyncio.Task) -> None:
        self._tasks.pop(response_id, None)
        events = self._logs.get(response_id)
        if events is not None:
            events.close()
            self._logs.move_to_end(response_id)
            self._trim()
        if not task.cancelled() and task.exception() is not None:  # the work stores its own failures
            log.error("background response %s failed", response_id, exc_info=task.exception())
