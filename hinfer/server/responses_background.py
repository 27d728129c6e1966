"""Background responses (`background: true`): the create request answers as soon as the generation runs, and
the generation goes on without the client.

The POST waits for the first token as any request does (so the engine's refusals, a full queue or a prompt too
long, stay the POST's own 429 / 400), stores the response as `in_progress` and returns it; a task then drives
the run to its end and stores what it ended as: `completed`, `incomplete`, `failed` (with its error) or
`cancelled` (POST /v1/responses/{id}/cancel). GET /v1/responses/{id} reads the stored object at any time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundResponses:
    """The running background generations by response id (each one task)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}

    def start(self, response_id: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"background {response_id}")
        self._tasks[response_id] = task
        task.add_done_callback(lambda t: self._done(response_id, t))

    def running(self, response_id: str) -> bool:
        return response_id in self._tasks

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

    def _done(self, response_id: str, task: asyncio.Task) -> None:
        self._tasks.pop(response_id, None)
        if not task.cancelled() and task.exception() is not None:  # the work stores its own failures
            log.error("background response %s failed", response_id, exc_info=task.exception())
