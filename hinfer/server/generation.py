"""One request's run on the engine: start (engine errors -> HTTP errors), event stream, disconnect, abort.

The first event is awaited before any HTTP status is sent, because QueueFullError / QueueTimeoutError /
RequestTooLargeError must become a 429 / 400 rather than a broken 200 stream. While we wait (queue, prefill,
a whole non-streaming answer) a watcher polls the connection and aborts the engine request if the client
goes away; once a StreamingResponse runs, Starlette notices the disconnect and cancels the body iterator,
whose `finally` calls `close()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import Request
from starlette.requests import HTTPConnection

from hinfer.engine.protocol import (
    EngineBrokenError,
    GenerationRequest,
    QueueFullError,
    QueueTimeoutError,
    RequestTooLargeError,
    Timings,
    TokenEvent,
)
from hinfer.sampling_params import SamplingParams
from hinfer.server.drain import ServerShuttingDown, shutting_down_error
from hinfer.server.errors import ERROR_LOGGED_KEY, APIError
from hinfer.server.state import ServerState

log = logging.getLogger(__name__)

_POLL_S = 0.2


def engine_error(e: BaseException) -> APIError:
    if isinstance(e, APIError):
        return e
    if isinstance(e, ServerShuttingDown):
        return APIError(503, "the server is shutting down and stopped this request before it finished "
                             "(--shutdown-timeout); retry it", code="server_shutting_down", retry_after=5)
    if isinstance(e, EngineBrokenError):
        return APIError(503, str(e), code="engine_unavailable", retry_after=30)
    if isinstance(e, QueueFullError):
        return APIError(429, f"the server is busy: all lanes are running and the queue is full ({e}); "
                             "retry later", code="queue_full")
    if isinstance(e, QueueTimeoutError):
        return APIError(429, f"the request waited too long for a free lane and was dropped ({e}); "
                             "retry later", code="queue_timeout")
    if isinstance(e, RequestTooLargeError):
        return APIError(400, f"the request does not fit this server's context: {e}", code="context_length_exceeded",
                        anthropic_message=f"prompt is too long: {e}")
    if isinstance(e, ValueError):  # the engine's own validation of the request
        return APIError(400, f"invalid request: {e}")
    return APIError(500, f"internal error while generating: {type(e).__name__}: {e}", code="internal_error")


class EngineRun:
    def __init__(self, st: ServerState, request_id: str, prompt_ids: list[int], sampling: SamplingParams,
                 http: HTTPConnection, images: list | None = None):
        self.st = st
        self.images = images or []  # ImageInputs, one per image pad run in prompt_ids
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.sampling = sampling
        self.http = http
        self.t0 = time.monotonic()
        self.t_first: float | None = None
        self.completion_tokens = 0
        self.finished = False
        self.client_gone = False
        self.final: TokenEvent | None = None
        self._it: Any = None
        self._first: TokenEvent | None = None
        self._watcher: asyncio.Task | None = None
        self._closed = False
        self._started = False
        self.interrupted = False  # by the drain (drain.py)
        self.admitted_cached: int | None = None  # the first event's prefix-cache tokens

    async def start(self) -> None:
        """Submit and wait for the first event. Raises APIError for engine refusals."""
        if self.st.drain.draining:
            raise shutting_down_error()
        self.st.metrics.in_flight += 1
        self.st.drain.add(self)
        self.watch()
        try:
            req = GenerationRequest(self.request_id, list(self.prompt_ids), self.sampling, images=self.images)
            self._it = self.st.engine.generate(req).__aiter__()
            try:
                self._first = await self._it.__anext__()
                self.admitted_cached = self._first.cached_tokens
            except StopAsyncIteration:
                self._first = None
                self.finished = True
        except BaseException as e:
            await self.close()
            if isinstance(e, Exception) and self.interrupted:
                raise shutting_down_error() from e
            if isinstance(e, Exception):
                if not isinstance(e, (QueueFullError, QueueTimeoutError, RequestTooLargeError, ValueError)):
                    log_failure(self, e)
                raise engine_error(e) from e
            raise
        if self.interrupted:  # the drain began before the first token: nothing was sent, so a clean 503
            await self.close()
            raise shutting_down_error()
        self._started = True
        if self._first is not None:
            self.t_first = time.monotonic()

    @property
    def has_output(self) -> bool:
        return self._started

    def interrupt(self) -> None:
        """Stop this run for the drain: the engine's abort ends its events, which then raise."""
        self.interrupted = True
        try:
            self.st.engine.abort(self.request_id)
        except Exception:
            log.debug("engine.abort failed", exc_info=True)

    def watch(self) -> None:
        """Abort the run when its client leaves: a request's connection polled, a WebSocket's `closed` event awaited
        (set by the handler that reads the socket while it answers: responses_socket.py)."""
        if self._watcher is not None:
            return
        if isinstance(self.http, Request):
            self._watcher = asyncio.create_task(self._watch_disconnect())
        elif isinstance(closed := getattr(self.http.state, "closed", None), asyncio.Event):
            self._watcher = asyncio.create_task(self._watch_closed(closed))

    def unwatch(self) -> None:
        """Stop polling the connection (a StreamingResponse listens for the disconnect itself)."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    async def _watch_disconnect(self) -> None:
        try:
            while not self.finished:
                if await self.http.is_disconnected():
                    log.info("client left request %s; aborting", self.request_id)
                    self.client_gone = True
                    self.st.engine.abort(self.request_id)
                    return
                await asyncio.sleep(_POLL_S)
        except asyncio.CancelledError:
            pass
        except Exception:  # the watcher must never take the request down
            log.debug("disconnect watcher failed", exc_info=True)

    async def _watch_closed(self, closed: asyncio.Event) -> None:
        try:
            await closed.wait()
            if not self.finished:
                log.info("client closed the socket of request %s; aborting", self.request_id)
                self.client_gone = True
                self.st.engine.abort(self.request_id)
        except asyncio.CancelledError:
            pass

    async def events(self) -> AsyncIterator[TokenEvent]:
        """All events, the prefetched first one included. Engine errors mid-stream propagate."""
        if self._first is not None:
            ev, self._first = self._first, None
            self._check_interrupted()
            self._note(ev)
            yield ev
            if ev.finish_reason is not None:
                self.finished = True
                return
        if self.finished:
            return
        async for ev in self._it:
            self._check_interrupted()
            if self.t_first is None:
                self.t_first = time.monotonic()
            self._note(ev)
            yield ev
            if ev.finish_reason is not None:
                self.finished = True
                return
        self.finished = True

    def _check_interrupted(self) -> None:
        if self.interrupted:
            raise ServerShuttingDown(f"request {self.request_id} stopped by the shutdown")

    def _note(self, ev: TokenEvent) -> None:
        self.completion_tokens += len(ev.token_ids)
        if ev.finish_reason is not None:
            self.final = ev

    @property
    def prompt_tokens(self) -> int:
        if self.final is not None and self.final.usage is not None and self.final.usage.prompt_tokens:
            return self.final.usage.prompt_tokens
        return len(self.prompt_ids)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the engine took from its prefix cache: the final event's count, or the first event's
        before it (0 before that)."""
        usage = self.final.usage if self.final is not None else None
        if usage is not None:
            return usage.cached_tokens
        return self.admitted_cached or 0

    @property
    def output_tokens(self) -> int:
        if self.final is not None and self.final.usage is not None and self.final.usage.completion_tokens:
            return self.final.usage.completion_tokens
        return self.completion_tokens

    def timings(self) -> dict[str, Any]:
        t: Timings = (self.final.timings if self.final is not None else None) or Timings()
        n = self.output_tokens
        out: dict[str, Any] = {
            "queue_s": round(t.queue_s, 6),
            "prefill_s": round(t.prefill_s, 6),
            "decode_s": round(t.decode_s, 6),
            "per_token_s": round(t.per_token_s, 6),
            "decode_tokens_per_s": round((n - 1) / t.decode_s, 3) if t.decode_s > 0 and n > 1 else None,
            "total_s": round(time.monotonic() - self.t0, 6),
            "ttft_s": round(self.t_first - self.t0, 6) if self.t_first is not None else None,
        }
        if t.spec_drafted:
            out["spec_drafted"] = t.spec_drafted
            out["spec_accepted"] = t.spec_accepted
        return out

    async def close(self) -> None:
        """Idempotent: stop the watcher, abort an unfinished request, release the engine's iterator."""
        if self._closed:
            return
        self._closed = True
        self.unwatch()
        self.st.drain.discard(self)
        self.st.metrics.in_flight -= 1
        aborted = not self.finished or self.client_gone
        if not self.finished:
            try:
                self.st.engine.abort(self.request_id)
            except Exception:
                log.debug("engine.abort failed", exc_info=True)
        it, self._it = self._it, None
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            # Shielded: close() also runs while a disconnect cancels the streaming task.
            with anyio.CancelScope(shield=True):
                try:
                    await aclose()
                except Exception:
                    log.debug("closing the engine iterator failed", exc_info=True)
        if not self._started:
            return
        ttft = f"first token {self.t_first - self.t0:.3f} s, " if self.t_first is not None else ""
        t = self.final.timings if self.final is not None else None
        spec = f", {t.spec_drafted} drafted, {t.spec_accepted} accepted" if t is not None and t.spec_drafted else ""
        log.info("%s (x-request-id %s): prompt %d (%d from the prefix cache), completion %d tokens%s, finish %s, "
                 "%s%.3f s", self.request_id, self.http.scope.get("state", {}).get("request_id"),
                 len(self.prompt_ids), self.cached_tokens, self.completion_tokens, spec,
                 self.final.finish_reason if self.final else "client-gone", ttft, time.monotonic() - self.t0)
        queue_s = self.final.timings.queue_s if self.final is not None and self.final.timings else None
        self.st.metrics.generation_done(
            prompt_tokens=len(self.prompt_ids), completion_tokens=self.completion_tokens,
            e2e_s=time.monotonic() - self.t0,
            ttft_s=(self.t_first - self.t0) if self.t_first is not None else None,
            queue_s=queue_s, aborted=aborted)


async def run_to_end(run: EngineRun, feed: Callable[[TokenEvent], object]) -> None:
    """Drive a non-streaming run: feed it every event; an engine failure becomes the dialect's error; always
    close the run (which aborts the request if it is still going)."""
    try:
        async for ev in run.events():
            feed(ev)
    except Exception as e:
        log_failure(run, e)
        raise engine_error(e) from e
    finally:
        await run.close()


def log_failure(run: EngineRun, e: BaseException) -> None:
    """One record per failed generation: a traceback for the unexpected, a line for a shutdown."""
    rid = run.http.scope.get("state", {}).get("request_id")
    if isinstance(e, ServerShuttingDown):
        log.info("%s (x-request-id %s): ended by the shutdown", run.request_id, rid)
        return
    log.error("generation failed for %s (x-request-id %s)", run.request_id, rid, exc_info=e)
    run.http.scope.setdefault("state", {})[ERROR_LOGGED_KEY] = True  # the middleware's status line would repeat it
