"""Engine: the AsyncEngine the server uses. EngineCore steps in one background thread; asyncio callers talk to it
through an inbox (new requests, aborts) and per-request asyncio queues (events), so the event loop never blocks
on a model step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from hinfer.engine.core import EngineCore
from hinfer.engine.protocol import (
    EngineBrokenError,
    EngineError,
    EngineStats,
    GenerationRequest,
    QueueFullError,
    QueueTimeoutError,
    TokenEvent,
)
from hinfer.sampling_defaults import SamplingDefaults

log = logging.getLogger("hinfer.engine")
GRAMMAR_THREADS = 2  # structured-output compiles at once (each may use xgrammar's own threads too)


class _Stream:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[TokenEvent | BaseException] = asyncio.Queue()

    def put(self, item: TokenEvent | BaseException) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class Engine:
    def __init__(self, core: EngineCore, model_name: str) -> None:
        self.core = core
        self.model_name = model_name
        self.max_context = core.ecfg.max_context
        visual = core.runner.model.visual
        self.vision = visual.cfg if visual is not None else None  # VisionConfig when images can be taken
        self._inbox: deque[tuple[GenerationRequest, _Stream]] = deque()
        self._streams: dict[str, _Stream] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # grammar compiles run here, apart from the default executor (prompt rendering): a slow one queues behind
        # other compiles only
        self._grammar_pool = ThreadPoolExecutor(GRAMMAR_THREADS, thread_name_prefix="hinfer-grammar")
        self._compiling = 0  # requests waiting for their grammar (counted on the event loop)

    @property
    def sampling_defaults(self) -> SamplingDefaults:
        """What the sampling fields a request leaves out take (the core's, from --generation-config)."""
        return self.core.sampling_defaults

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="hinfer-engine", daemon=True)
            self._thread.start()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def close(self) -> None:
        """After stop: the core lets go of its processes (tensor parallelism's other ranks)."""
        self._grammar_pool.shutdown(wait=False, cancel_futures=True)
        self.core.close()

    # ---- requests ------------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenEvent]:
        """Errors (QueueFullError, RequestTooLargeError, ValueError) surface from the first __anext__. A
        structured-output grammar is compiled here, in a worker thread, so that the engine thread only makes its
        matcher: a compile of many tools or a large schema (up to hundreds of ms) holds up this request alone."""
        await self.start()
        if request.sampling.structured is not None and request.grammar is None:
            limit = self.core.ecfg.max_concurrency + self.core.ecfg.max_pending_requests
            if self._compiling >= limit:  # as many as lanes and queue hold: the queue's 429, before any compile
                raise QueueFullError(f"server busy: {self._compiling} structured-output grammars compiling "
                                     f"(--max-concurrency + --max-pending-requests = {limit})")  # fmt: skip
            self._compiling += 1
            try:
                request.grammar = await asyncio.get_running_loop().run_in_executor(
                    self._grammar_pool, self.core.grammars.prepare, request.sampling.structured, request.request_id)
            finally:
                self._compiling -= 1
        stream = _Stream(asyncio.get_running_loop())
        self._inbox.append((request, stream))
        self._wake.set()
        done = False
        try:
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item.finish_reason is not None:
                    done = True
                yield item
                if done:
                    return
        finally:
            if not done:
                self.abort(request.request_id)

    def abort(self, request_id: str) -> None:
        self.core.abort(request_id)
        self._wake.set()

    def stats(self) -> EngineStats:
        return self.core.stats()

    def clear_prefix_cache(self) -> None:
        """Drop the prefix cache (pages and GDN checkpoints not in use) at the engine thread's next step."""
        self.core.request_clear_prefix_cache()
        self._wake.set()

    # ---- the engine thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping:
            self._drain_inbox()
            if not self.core.has_work:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                events = self.core.step()
            except Exception as e:  # a bug or device error: fail what is in flight, keep serving
                log.exception("engine step failed")
                broken = self.core.runner.broken  # no later step can run either (a tensor-parallel rank gone)
                self._fail_all(EngineBrokenError(broken) if broken else EngineError(f"internal engine error: {e}"))
                continue
            for ev in events:
                self._deliver(ev)

    def _drain_inbox(self) -> None:
        while self._inbox:
            req, stream = self._inbox.popleft()
            try:
                self.core.add(req)
            except Exception as e:
                stream.put(e)
                continue
            self._streams[req.request_id] = stream

    def _deliver(self, ev: TokenEvent) -> None:
        stream = self._streams.get(ev.request_id)
        if ev.finish_reason is not None:
            self._streams.pop(ev.request_id, None)
        if stream is None:
            return
        if ev.finish_reason == "timeout":
            stream.put(
                QueueTimeoutError(
                    f"request waited longer than --pending-timeout-ms {self.core.ecfg.pending_timeout_ms} for a lane"
                )
            )
        else:
            stream.put(ev)

    def _fail_all(self, err: EngineError) -> None:
        sch = self.core.scheduler
        for seq in list(sch.running) + list(sch.waiting):
            sch.finish(seq)
            self.core._by_id.pop(seq.request_id, None)
            stream = self._streams.pop(seq.request_id, None)
            if stream is not None:
                stream.put(err)
