"""What the batch APIs share: jobs kept in memory by id, oldest first, each with the task that runs it; the newest
ones only (an ended job makes room first), and a shutdown cancels the running ones. Their requests go through the
server's own routes in process, waiting while the engine refuses them for load."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any, Generic, Protocol, TypeVar

import httpx

from hinfer.server.errors import APIError

RETRY_S = 0.5  # the wait before a request the engine refused for load (429) goes again


class Job(Protocol):
    id: str
    ended_at: Any
    task: asyncio.Task | None

    @property
    def waiting(self) -> int: ...  # its requests not answered yet


J = TypeVar("J", bound=Job)


class KeptJobs(Generic[J]):
    def __init__(self, kept: int, what: str) -> None:
        self._jobs: OrderedDict[str, J] = OrderedDict()
        self.kept, self.what = kept, what

    def start(self, job: J, work: Coroutine[Any, Any, None]) -> J:
        """Keep a new job and run `work` for it."""
        self.add(job)
        job.task = asyncio.create_task(work, name=f"{self.what} {job.id}")
        return job

    def add(self, job: J) -> None:
        """Keep a new job, dropping the oldest ended one when `kept` are kept (a 429 when all of them run)."""
        if len(self._jobs) >= self.kept:
            ended = next((jid for jid, j in self._jobs.items() if j.ended_at is not None), None)
            if ended is None:
                raise APIError(429, f"{self.kept} {self.what} are running: wait for one to end or cancel one")
            del self._jobs[ended]
        self._jobs[job.id] = job

    def get(self, job_id: str) -> J | None:
        return self._jobs.get(job_id)

    def pop(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def newest_first(self) -> list[J]:
        return list(reversed(self._jobs.values()))

    def load(self) -> tuple[int, int]:
        """(jobs running, their requests not answered yet): the /metrics gauges."""
        running = [j for j in self._jobs.values() if j.ended_at is None]
        return len(running), sum(j.waiting for j in running)

    def cancel(self, job: J) -> None:  # each store marks the job as cancelling first
        if job.task is not None:
            job.task.cancel()

    async def stop(self) -> None:
        """Cancel every running job (the server is shutting down) and wait for them to end."""
        running = [j for j in self._jobs.values() if j.ended_at is None]
        for j in running:
            self.cancel(j)
        await asyncio.gather(*(j.task for j in running if j.task is not None), return_exceptions=True)


def in_process_client(app: Any, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An HTTP client on `app` itself (ASGI, no socket): a batch's requests go through the server's own routes,
    middleware (the key) included; a route's unexpected failure comes back as its 500 answer, as over a socket."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://batch", timeout=None, headers=headers)


async def post_until_taken(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    """POST `body`, again after RETRY_S while the answer is a 429 (the engine's queue is full): a batch's request
    waits for room instead of ending refused."""
    while True:
        r = await client.post(url, json=body)
        if r.status_code != 429:
            return r
        await asyncio.sleep(RETRY_S)
