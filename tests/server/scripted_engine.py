"""A scripted AsyncEngine for server tests: emits the tokens of a chosen text, one per step.

The text is picked by a keyword found in the prompt (the keyword that occurs last wins), tokenized with the
real tokenizer, and followed by `<|im_end|>`. It honours what the real engine promises: lanes and a bounded
queue (QueueFullError / QueueTimeoutError), max_tokens, stop strings (cut from the text), stop token ids, the
thinking budget (forces `</think>` and skips the script to its own `</think>`), logprobs, abort (ends the
stream with finish_reason "abort" at the next step) and freeing the lane when the consumer leaves early.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from hinfer.engine.protocol import (
    EngineBrokenError,
    EngineStats,
    GenerationRequest,
    QueueFullError,
    QueueTimeoutError,
    RequestTooLargeError,
    Timings,
    TokenEvent,
    TopLogprob,
    Usage,
)
from hinfer.sampling_defaults import NEUTRAL

Script = str | Callable[[GenerationRequest, str], str]


@dataclass
class _Waiter:
    request_id: str
    future: asyncio.Future


class ScriptedEngine:
    def __init__(self, tokenizer, scripts: dict[str, Script] | None = None, *, default: Script = "Hello there!",
                 lanes: int = 4, max_pending: int = 8, pending_timeout_s: float = 30.0, step_s: float = 0.0,
                 max_context: int = 4096, model_name: str = "scripted"):
        self.tokenizer = tokenizer
        self.scripts = dict(scripts or {})
        self.default = default
        self.lanes = lanes
        self.max_pending = max_pending
        self.pending_timeout_s = pending_timeout_s
        self.step_s = step_s
        self.max_context = max_context
        self.sampling_defaults = NEUTRAL  # tests set the served model's defaults here
        self.model_name = model_name
        self.fail_next: tuple[int, BaseException] | None = None  # (after k tokens, error) for the next request
        self.broken: str | None = None  # set: every request refused as an engine that can run no step (stats too)
        self.busy = 0
        self._queue: deque[_Waiter] = deque()
        self._aborts: set[str] = set()
        self.aborted: list[str] = []  # request ids whose stream ended by abort or by the consumer leaving
        self.requests: list[GenerationRequest] = []
        self.finished = 0
        self.tokens = 0
        self.started = False
        self.stopped = False

    # -- protocol -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        pass

    def stats(self) -> EngineStats:
        return EngineStats(lanes_total=self.lanes, lanes_busy=self.busy, queue_depth=len(self._queue),
                           requests_finished=self.finished, tokens_generated=self.tokens,
                           extra={"aborted": float(len(self.aborted))}, broken=self.broken)

    def abort(self, request_id: str) -> None:
        self._aborts.add(request_id)
        for w in list(self._queue):
            if w.request_id == request_id and not w.future.done():
                w.future.set_result(False)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TokenEvent]:
        self.requests.append(request)
        if self.broken:
            raise EngineBrokenError(self.broken)
        if len(request.prompt_token_ids) + 1 > self.max_context:
            raise RequestTooLargeError(f"prompt of {len(request.prompt_token_ids)} tokens > {self.max_context}")
        t0 = time.monotonic()
        admitted = await self._admit(request.request_id)
        queue_s = time.monotonic() - t0
        if not admitted:
            self._record_abort(request.request_id)
            yield self._final(request, "abort", "", 0, queue_s, t0)
            return
        inner = self._run(request, queue_s, t0)
        try:
            async for ev in inner:
                yield ev
        finally:
            await inner.aclose()  # run its finally now, not whenever it is garbage-collected
            self._release()

    # -- lanes and queue ----------------------------------------------------------------------------------

    async def _admit(self, request_id: str) -> bool:
        if self.busy < self.lanes and not self._queue:
            self.busy += 1
            return True
        if len(self._queue) >= self.max_pending:
            raise QueueFullError(f"{len(self._queue)} requests pending")
        w = _Waiter(request_id, asyncio.get_running_loop().create_future())
        self._queue.append(w)
        try:
            ok = await asyncio.wait_for(asyncio.shield(w.future), self.pending_timeout_s)
        except TimeoutError:
            raise QueueTimeoutError(f"waited {self.pending_timeout_s} s") from None
        except BaseException:
            if w.future.done() and w.future.result():
                self._release()  # a lane was handed to us as we left
            raise
        finally:
            if w in self._queue:
                self._queue.remove(w)
        return ok

    def _release(self) -> None:
        while self._queue:
            w = self._queue.popleft()
            if not w.future.done():
                w.future.set_result(True)  # the lane passes on; busy stays the same
                return
        self.busy -= 1

    def _record_abort(self, request_id: str) -> None:
        self._aborts.discard(request_id)
        self.aborted.append(request_id)

    # -- generation ---------------------------------------------------------------------------------------

    def _script_text(self, request: GenerationRequest) -> str:
        prompt = self.tokenizer.decode(request.prompt_token_ids, skip_special_tokens=False)
        best, pos = self.default, -1
        for key, script in self.scripts.items():
            p = prompt.rfind(key)
            if p > pos:
                best, pos = script, p
        return best(request, prompt) if callable(best) else best

    async def _run(self, req: GenerationRequest, queue_s: float, t0: float) -> AsyncIterator[TokenEvent]:
        sp = req.sampling
        tok = self.tokenizer
        ids = tok.encode(self._script_text(req)) + [tok.im_end_id]
        eos = set(tok.eos_token_ids) | set(sp.stop_token_ids)
        think_end = sp.think_end_token_id
        detok = tok.detokenizer(sp.skip_special_tokens)
        text, sent = "", 0
        n = 0
        t_first = None
        i = 0
        left_normally = False
        fail, self.fail_next = self.fail_next, None
        try:
            while i < len(ids):
                await asyncio.sleep(self.step_s)
                if fail is not None and n >= fail[0]:
                    raise fail[1]
                if req.request_id in self._aborts:
                    self._record_abort(req.request_id)
                    left_normally = True
                    yield self._final(req, "abort", "", n, queue_s, t0, t_first)
                    return
                tid = ids[i]
                i += 1
                if (sp.thinking_budget is not None and think_end is not None and n >= sp.thinking_budget
                        and think_end in ids[i - 1:]):
                    tid = think_end  # budget spent: close thinking now, continue after the script's </think>
                    i = ids.index(think_end, i - 1) + 1
                n += 1
                self.tokens += 1
                t_first = t_first or time.monotonic()
                lp, top = self._logprobs(tid, sp.logprobs)
                if tid in eos and not sp.ignore_eos:
                    tail = text[sent:] + detok.flush()
                    left_normally = True
                    yield self._final(req, "stop", tail, n, queue_s, t0, t_first, [tid], tid, lp, top)
                    return
                text += detok.add([tid])
                cut = _find_stop(text, sp.stop, sent)
                if cut is not None:
                    idx, s = cut
                    left_normally = True
                    yield self._final(req, "stop", text[sent:idx], n, queue_s, t0, t_first, [tid], s, lp, top)
                    return
                if n >= sp.max_tokens:
                    left_normally = True
                    yield self._final(req, "length", text[sent:] + detok.flush(), n, queue_s, t0, t_first, [tid],
                                      None, lp, top)
                    return
                hold = max((_partial(text, s) for s in sp.stop), default=0)
                out = text[sent:len(text) - hold]
                sent += len(out)
                yield TokenEvent(req.request_id, [tid], out, logprobs=lp, top_logprobs=top)
            left_normally = True
            yield self._final(req, "stop", text[sent:] + detok.flush(), n, queue_s, t0, t_first)
        finally:
            if not left_normally:
                self._record_abort(req.request_id)  # the consumer left early: like the real engine, free the lane

    def _logprobs(self, tid: int, k: int | None):
        if k is None:
            return None, None
        top = [TopLogprob(tid, -0.25)] + [TopLogprob((tid + j) % self.tokenizer.vocab_size, -1.0 - j)
                                          for j in range(1, k)]
        return [-0.25], [top[:k]]

    def _final(self, req, reason, text, n, queue_s, t0, t_first=None, ids=None, stop_reason=None, lp=None,
               top=None) -> TokenEvent:
        self.finished += 1
        now = time.monotonic()
        first = t_first or now
        timings = Timings(queue_s=queue_s, prefill_s=first - t0 - queue_s, decode_s=now - first,
                          per_token_s=(now - first) / max(1, n - 1))
        return TokenEvent(req.request_id, ids or [], text, logprobs=lp, top_logprobs=top, finish_reason=reason,
                          stop_reason=stop_reason, usage=Usage(len(req.prompt_token_ids), n), timings=timings)


def _find_stop(text: str, stops: list[str], sent: int) -> tuple[int, str] | None:
    best = None
    for s in stops:
        idx = text.find(s, max(0, sent - len(s)))
        if idx >= 0 and (best is None or idx < best[0]):
            best = (idx, s)
    return best


def _partial(text: str, stop: str) -> int:
    for k in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-k:]):
            return k
    return 0
