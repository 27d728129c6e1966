"""Scheduler: lanes, a bounded FIFO queue, page/slot reservation, and chunked prefill mixed with decode.

Admission reserves every page a request can ever need (prompt + max_tokens, capped at max_context), so a running
request never runs out of KV and nothing is ever preempted. When pages are short (a small --kv-capacity) the head
of the queue waits (FIFO: no overtaking, no starvation). Each step runs one decode token for every lane past its
prompt plus at most `prefill_chunk` prompt tokens, so a long prompt delays the other lanes by one chunk at most.
With speculative decoding a lane also holds `draft_slots` GDN slots (K+1) for rollback, taken and freed with it.
With the prefix cache (`prefix`, prefix_reuse.py) admission first takes the longest cached prefix (its pages are
shared, only the rest is reserved anew), and a prompt chunk marks the position inside it where the GDN state is
saved (a second such position ends it).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from hinfer.engine.free_list import FreeList
from hinfer.engine.prefix_cache import PagePool
from hinfer.engine.prompt_logprobs import PROMPT_LOGPROBS_CHUNK
from hinfer.engine.protocol import QueueFullError
from hinfer.engine.sequence import ScheduledChunk, Sequence, Status
from hinfer.model.state import RESERVED_PAGES, RESERVED_SLOTS

if TYPE_CHECKING:
    from hinfer.engine.prefix_reuse import PrefixReuse


class Scheduler:
    def __init__(
        self,
        *,
        max_concurrency: int,
        max_pending: int,
        pending_timeout_s: float,
        prefill_chunk: int,
        page_size: int,
        num_pages: int,
        num_slots: int,
        max_context: int,
        draft_slots: int = 0,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.max_pending = max_pending
        self.pending_timeout_s = pending_timeout_s
        self.prefill_chunk = prefill_chunk
        self.page_size = page_size
        self.max_context = max_context
        self.draft_slots = draft_slots  # extra GDN slots per lane for speculative rollback (K+1, or 0)
        self.pages = PagePool(num_pages, first=RESERVED_PAGES)
        self.slots = FreeList(num_slots, first=RESERVED_SLOTS)
        self.lanes = FreeList(max_concurrency)  # lane id: the sampler's row for this request
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.prefix: PrefixReuse | None = None  # set by the engine when the prefix cache is on

    # ---- queue -------------------------------------------------------------------------------------
    def pages_needed(self, seq: Sequence) -> int:
        total = min(seq.max_total_tokens, self.max_context)
        return -(-total // self.page_size)

    def add(self, seq: Sequence) -> None:
        """Queue a request; QueueFullError when no lane is free and the queue holds max_pending already."""
        free_lanes = self.max_concurrency - len(self.running)
        if len(self.waiting) >= max(0, free_lanes) + self.max_pending:
            raise QueueFullError(
                f"server busy: {len(self.running)} lanes running and {len(self.waiting)} requests queued "
                f"(--max-pending-requests {self.max_pending})"
            )
        self.waiting.append(seq)

    def expire(self, now: float | None = None) -> list[Sequence]:
        """Remove and return queued requests that waited past the pending timeout."""
        now = time.monotonic() if now is None else now
        expired = [s for s in self.waiting if now - s.arrival > self.pending_timeout_s]
        for s in expired:
            self.waiting.remove(s)
            s.status = Status.FINISHED
            s.finish_reason = "timeout"
        return expired

    def admit(self) -> list[Sequence]:
        """Move queue heads into free lanes while their pages and slots (current + draft) are available."""
        admitted = []
        while self.waiting and len(self.running) < self.max_concurrency:
            seq = self.waiting[0]
            hit = self.prefix.lookup(seq) if self.prefix is not None else None
            shared = hit.pages if hit is not None else []
            need = self.pages_needed(seq) - len(shared)
            if not self.pages.can_alloc(need, shared) or self.slots.num_free < 1 + self.draft_slots:
                break
            self.waiting.popleft()
            seq.pages = self.prefix.take(seq, hit) if hit is not None else []
            seq.pages += self.pages.alloc(need)
            seq.slot = self.slots.alloc(1)[0]
            seq.draft_slots = self.slots.alloc(self.draft_slots)
            seq.lane = self.lanes.alloc(1)[0]
            seq.status = Status.RUNNING
            seq.admitted = time.monotonic()
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    # ---- steps -------------------------------------------------------------------------------------
    def schedule(self) -> list[ScheduledChunk]:
        """Decode lanes first (one token each), then prompt chunks within the prefill budget, oldest first."""
        decode = [ScheduledChunk(s, 1, True) for s in self.running if not s.in_prefill]
        budget = self.prefill_chunk
        prefill = []
        for s in self.running:
            if not s.in_prefill or budget <= 0:
                continue
            n = min(len(s.prompt_ids) - s.num_cached, budget)
            if s.params.prompt_logprobs is not None:  # every position's logits: keep them bounded
                n = min(n, PROMPT_LOGPROBS_CHUNK)
            # GDN checkpoints inside the chunk: the first is saved during the step; a second ends the chunk
            inside = [t - s.num_cached for t in s.ckpt_targets if s.num_cached < t < s.num_cached + n]
            if len(inside) > 1:
                n = inside[1]
            budget -= n
            prefill.append(ScheduledChunk(s, n, s.num_cached + n == len(s.prompt_ids),
                                          save_at=inside[0] if inside else None))  # fmt: skip
        return decode + prefill

    def finish(self, seq: Sequence) -> None:
        """Return a running or queued sequence's lane, pages and slots."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        if self.prefix is not None:
            self.prefix.forget(seq)
        if seq.pages:
            self.pages.release(seq.pages)
            seq.pages = []
        if seq.slot >= 0:
            self.slots.free([seq.slot])
            seq.slot = -1
        if seq.draft_slots:
            self.slots.free(seq.draft_slots)
            seq.draft_slots = []
        seq.drafts = None
        if seq.lane >= 0:
            self.lanes.free([seq.lane])
            seq.lane = -1
        seq.status = Status.FINISHED
