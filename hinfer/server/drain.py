"""Graceful shutdown: stop admitting, let running requests finish, then end the rest in their dialect.

`begin()` (first SIGTERM/SIGINT): new requests and requests that have not produced their first token are
answered 503 with Retry-After (nothing was sent to them yet, so another instance can take them whole).
Running ones go on. `expire()` (after --shutdown-timeout, or a second signal): every run still going is
interrupted; streams end with the dialect's error event and terminator, non-streaming requests get a 503.
Runs are interrupted through the engine's abort, whose final event ends the run's event loop: no per-token
cost while serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from hinfer.server.errors import APIError

log = logging.getLogger("hinfer.server")

RETRY_AFTER_S = 5  # what a refused client is told to wait: a restart or another instance behind the balancer


class ServerShuttingDown(Exception):
    """Raised inside a run that the drain interrupted."""


class Interruptible(Protocol):
    request_id: str

    @property
    def has_output(self) -> bool: ...

    def interrupt(self) -> None: ...


def shutting_down_error() -> APIError:
    return APIError(503, "the server is shutting down and takes no new requests; retry shortly (another instance, "
                         "or this one once restarted)", code="server_shutting_down", retry_after=RETRY_AFTER_S,
                    close=True)


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.expired = False
        self.runs: set[Interruptible] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- runs ------------------------------------------------------------------------------------------
    def add(self, run: Interruptible) -> None:
        self.runs.add(run)
        self._idle.clear()
        if self.expired or (self.draining and not run.has_output):
            run.interrupt()

    def discard(self, run: Interruptible) -> None:
        self.runs.discard(run)
        if not self.runs:
            self._idle.set()

    # ---- admission -------------------------------------------------------------------------------------
    @staticmethod
    def refuses(path: str, method: str) -> bool:
        """What is refused while draining: everything that starts work (reads and /health stay answered)."""
        return method not in ("GET", "HEAD", "OPTIONS")

    @staticmethod
    def refusal() -> APIError:
        return shutting_down_error()

    # ---- the sequence ----------------------------------------------------------------------------------
    def begin(self) -> None:
        if self.draining:
            return
        self.draining = True
        waiting = [r for r in self.runs if not r.has_output]
        log.info("draining: no new requests; %d running, %d not started (refused with 503)",
                 len(self.runs) - len(waiting), len(waiting))
        for r in waiting:
            r.interrupt()

    def expire(self) -> None:
        self.draining = self.expired = True
        if self.runs:
            log.warning("shutdown timeout: ending %d running request(s) with an error event", len(self.runs))
        for r in list(self.runs):
            r.interrupt()

    async def run(self, timeout_s: float, grace_s: float = 5.0) -> None:
        """begin, wait for the runs up to timeout_s, expire, then wait up to grace_s for them to end."""
        t0 = time.monotonic()
        self.begin()
        if not await self._wait_idle(timeout_s):
            self.expire()
            await self._wait_idle(grace_s)
        log.info("drained in %.1f s", time.monotonic() - t0)

    async def _wait_idle(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
