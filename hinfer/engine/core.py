"""EngineCore: the synchronous heart of the engine. add -> step -> events; abort; stats.

One `step()` expires queued requests past their timeout, admits queue heads into free lanes, runs one forward
batch (decode lanes + prompt chunks), samples, applies stop rules, and returns TokenEvents. Finished sequences
give back their lane, pages and slots in the same step. The async wrapper (engine.py) runs this in one thread.
With `--spec mtp` the step goes through the SpecDecoder (engine/spec/): a lane may produce several tokens per
step, each passed through the same stop rules, and the drafter runs for the lanes that go on.
With the prefix cache (on unless --no-prefix-cache) admission reuses cached prefixes and every step
names the pages it filled and saves GDN checkpoints (prefix_reuse.py, docs/prefix-cache.md).
Plain decode runs a step ahead (--decode-ahead, on by default with CUDA graphs): while every lane only decodes,
`step()` queues the next decode step, its input tokens taken from the device, before it reads the tokens of the
one in flight, so the GPU does not wait for the host between steps. Any other step (a prompt chunk, an admission,
a lane with a grammar or a thinking budget) first reads the step in flight, then runs as usual.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from hinfer.config import EngineConfig
from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.prefix_reuse import PrefixReuse
from hinfer.engine.protocol import (
    EngineBrokenError,
    EngineError,
    EngineStats,
    GenerationRequest,
    RequestTooLargeError,
    Timings,
    TokenEvent,
    Usage,
)
from hinfer.engine.runner import AheadStep, ModelRunner, StepResult
from hinfer.engine.sampler import RowState
from hinfer.engine.scheduler import Scheduler
from hinfer.engine.sequence import ScheduledChunk, Sequence, Status
from hinfer.engine.stop import StopStringMatcher
from hinfer.model.image_prompt import hash_ids, place_images
from hinfer.sampling_defaults import NEUTRAL

if TYPE_CHECKING:
    from hinfer.engine.spec.decoder import LaneOutput, Launched

log = logging.getLogger("hinfer.engine")


class EngineCore:
    def __init__(self, runner: ModelRunner, tokenizer, ecfg: EngineConfig, eos_token_ids: list[int]) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.ecfg = ecfg
        self.eos = set(eos_token_ids)
        st = runner.state.shape
        self.scheduler = Scheduler(
            max_concurrency=ecfg.max_concurrency,
            max_pending=ecfg.max_pending_requests,
            pending_timeout_s=ecfg.pending_timeout_ms / 1000.0,
            prefill_chunk=ecfg.prefill_chunk,
            page_size=st.page_size,
            num_pages=st.num_pages,
            num_slots=st.num_slots,
            max_context=ecfg.max_context,
            draft_slots=ecfg.draft_slots,
        )
        self.sampling_defaults = NEUTRAL  # what a request's omitted sampling fields take (--generation-config)
        self.spec = None  # SpecDecoder with --spec; its `drafter` may be swapped (tests)
        if ecfg.spec:
            from hinfer.engine.spec import make_spec_decoder

            self.spec = make_spec_decoder(runner, ecfg)
        self.prefix: PrefixReuse | None = None
        if st.checkpoint_slots:
            ckpts = CheckpointPool(st.checkpoint_slot_ids)
            host = runner.host_tier("checkpoints", st.host_checkpoints) if st.host_checkpoints else None
            host_kv = runner.host_tier("pages", st.host_kv_pages) if st.host_kv_pages else None
            self.prefix = PrefixReuse(self.scheduler.pages, ckpts, runner.state, st.page_size, host, host_kv,
                                      getattr(tokenizer, "im_start_id", None))  # fmt: skip
            self.scheduler.prefix = self.prefix
        self._grammars = None  # GrammarBackend, made on the first constrained request
        self._grammars_lock = threading.Lock()
        self._runs_ahead = ecfg.decode_ahead and runner.runs_ahead  # with --spec: its plain steps (runs_plain)
        self._ahead: AheadStep | None = None  # the decode step in flight whose tokens are not read yet
        self._round: Launched | None = None  # a speculative round launched before the last one's bookkeeping
        self._clear_requested = False
        self._seeds = random.Random(ecfg.seed)
        self._by_id: dict[str, Sequence] = {}
        self._aborted: deque[str] = deque()
        self._early_aborts: set[str] = set()  # aborted before they reached add() (still in the engine's inbox)
        self.finished_count = 0
        self.tokens_generated = 0
        self.prompt_tokens = 0

    # ---- requests ------------------------------------------------------------------------------
    def validate(self, req: GenerationRequest) -> None:
        n = len(req.prompt_token_ids)
        if n == 0:
            raise RequestTooLargeError("the prompt is empty")
        if n >= self.ecfg.max_context:
            raise RequestTooLargeError(
                f"the prompt has {n} tokens; this server's --max-context is {self.ecfg.max_context}"
            )
        pages = -(-min(n + req.sampling.max_tokens, self.ecfg.max_context) // self.scheduler.page_size)
        if pages > self.scheduler.pages.capacity:
            raise RequestTooLargeError(
                f"prompt + max_tokens needs {pages} KV pages; the pool has {self.scheduler.pages.capacity}"
            )

    def add(self, req: GenerationRequest) -> None:
        """Validate and queue; raises RequestTooLargeError / QueueFullError / ValueError (bad params), and
        EngineBrokenError once no step can run."""
        if self.runner.broken:
            raise EngineBrokenError(self.runner.broken)
        req.sampling.validate()
        self.validate(req)
        if req.request_id in self._by_id:
            raise ValueError(f"duplicate request id {req.request_id!r}")
        if req.request_id in self._early_aborts:  # its client left before it was queued: never run it
            self._early_aborts.discard(req.request_id)
            raise EngineError(f"request {req.request_id!r} was aborted")
        p = req.sampling
        seed = p.seed if p.seed is not None else self._seeds.getrandbits(63)
        seq = Sequence(req.request_id, list(req.prompt_token_ids), p, seed)
        if req.images:
            self._place_images(seq, req)
        if p.structured is not None:  # compiled ahead by the server, else here: a bad schema fails the request
            prepared = req.grammar or self.grammars.prepare(p.structured, req.request_id)
            seq.grammar = self.grammars.matcher(prepared)
        seq.detok = self.tokenizer.detokenizer(skip_special_tokens=p.skip_special_tokens)
        seq.stop_matcher = StopStringMatcher(p.stop)
        self.scheduler.add(seq)
        self._by_id[req.request_id] = seq

    def _place_images(self, seq: Sequence, req: GenerationRequest) -> None:
        """Positions and placeholder rows of the request's images; encoded later, by the step that needs them."""
        vision = self.runner.model.visual
        if vision is None:
            raise ValueError("this model takes no images (no vision tower loaded, or --no-vision)")
        merge = vision.cfg.spatial_merge_size
        grids = [img.grid for img in req.images]
        seq.images = place_images(seq.prompt_ids, vision.cfg.image_token_id, grids, merge)
        seq.image_inputs = list(req.images)
        seq.hash_ids = hash_ids(seq.prompt_ids, seq.images.rows, req.images, merge)

    def abort(self, request_id: str) -> None:
        """Thread-safe: takes effect at the next step."""
        self._aborted.append(request_id)

    @property
    def grammars(self):
        """The structured-output compiler (engine/structured/grammar.py), made on first use (by the engine thread
        or the server's, hence the lock)."""
        with self._grammars_lock:
            if self._grammars is None:
                from hinfer.engine.structured.grammar import GrammarBackend

                self._grammars = GrammarBackend(self.tokenizer, self.runner.sampler.vocab_size, sorted(self.eos))
            return self._grammars

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting or self._aborted or self._clear_requested
                    or self._ahead is not None or self._round is not None)

    def clear_prefix_cache(self) -> None:
        """Drop every cached page and GDN checkpoint that no running request uses. Call from the stepping thread
        (LLM, tests); the async Engine goes through request_clear_prefix_cache."""
        if self.prefix is not None:
            self.prefix.clear()

    def spill_prefix_cache(self) -> None:
        """Move every cached page and GDN checkpoint that no running request uses to the host tiers (dropped
        where there is none), as if other prompts had churned them out; the TTFT benchmark's host-RAM case.
        Call from the stepping thread."""
        if self.prefix is not None:
            self.prefix.spill_all()

    def close(self) -> None:
        """Let go of the runner's processes (tensor parallelism's other ranks); the core takes no steps after."""
        self.runner.close()

    def request_clear_prefix_cache(self) -> None:
        """Thread-safe: the cache is cleared at the start of the next step."""
        self._clear_requested = True

    # ---- the step ------------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        events: list[TokenEvent] = []
        if self._clear_requested:
            self._clear_requested = False
            self.clear_prefix_cache()
        events += self._drop_aborted()
        for seq in self.scheduler.expire():
            events.append(self._final(seq, "timeout", ""))
        if self._ahead is not None:
            nxt = self._chain(self._ahead)
            events += self._land(self._ahead)
            self._ahead = nxt
            if nxt is not None:
                return events
        if self._round is not None:  # launched at the end of the last step: read it (and maybe launch the next)
            launched, self._round = self._round, None
            return events + self._spec_landed(launched)
        admitted = self.scheduler.admit()
        if self.prefix is not None:
            self.prefix.restore(admitted)  # a hit's checkpoint copied into its slot, zeros for the rest
        else:
            self.runner.state.reset_slots([s.slot for s in admitted])
        for seq in admitted:
            seq.sampler_state = RowState(seq.params, seq.seed, slot=seq.lane, prompt_ids=seq.prompt_ids,
                                         grammar=seq.grammar)
            self.runner.sampler.add_row(seq.sampler_state)
        chunks = self.scheduler.schedule()
        if not chunks:
            return events
        if self.prefix is not None:
            self.prefix.place_saves(chunks)
        self.prompt_tokens += sum(c.num_tokens for c in chunks if c.seq.in_prefill)
        now = time.monotonic()
        if self._ahead_ok(chunks):
            self._ahead = self.runner.launch(chunks, keep_hidden=self.spec is not None)  # tokens come next step
            return events
        if self.spec is not None:
            return events + self._spec_landed(self.spec.launch(chunks))
        result: StepResult = self.runner.step(chunks)
        if self.prefix is not None:  # before the stop rules: a finishing request still holds its pages and slot
            self.prefix.after_step([c.seq for c in chunks])
        sampled = [c.seq for c in chunks if c.samples]
        for i, seq in enumerate(sampled):
            events.append(self._accept_tokens(seq, [result.token_ids[i]], [result.logprobs[i]],
                                              [result.top_logprobs[i]], now))  # fmt: skip
        return events

    def _spec_landed(self, launched: Launched) -> list[TokenEvent]:
        """Read a speculative step and account for it. Where the next round may go first (`_round_first`), its
        tokens are counted, the drafter hands out the next drafts and the next round is launched before the
        prefix cache's page naming, the text and the events of this one, which then overlap the GPU's work; else
        in the usual order, the stop rules before the drafter."""
        assert self.spec is not None
        outs = self.spec.land(launched)
        now = time.monotonic()
        seqs = [c.seq for c in launched.chunks if c.seq.status is Status.RUNNING]
        if self._round_first(launched, outs):
            for o in outs:
                self._count_tokens(o.seq, o.token_ids, now)
            self.spec.after_step()
            chunks = [ScheduledChunk(s, 1, True) for s in self.scheduler.running]
            if not self.spec.runs_plain(chunks):  # a plain step next: the usual path takes it (run ahead)
                self._round = self.spec.launch(chunks, first=True)
            if self.prefix is not None:  # the lanes' tokens are counted: nothing is ahead of their lengths
                self.prefix.after_step(seqs)
            return [self._accept_tokens(o.seq, o.token_ids, o.logprobs, o.top_logprobs, now, counted=True)
                    for o in outs]  # fmt: skip
        if self.prefix is not None:  # before the stop rules, as below; a round caches its accepted drafts
            self.prefix.after_step(seqs, {id(o.seq): o.token_ids for o in outs})
        events = [self._accept_tokens(o.seq, o.token_ids, o.logprobs, o.top_logprobs, now) for o in outs]
        self.spec.after_step()  # drafts for the lanes that go on
        return events

    def _round_first(self, launched: Launched, outs: list[LaneOutput]) -> bool:
        """Whether the next round may be launched before this one's bookkeeping: decode ahead on, a verify round
        of every running lane, no request that could take a free lane, no abort or cache clearing pending, and
        no lane that this round could finish or whose stop needs its text (stop strings, a grammar): then the
        stop rules cannot end a lane, and the lanes of the next round are this round's."""
        sch = self.scheduler
        if (not self._runs_ahead or launched.plain or self._aborted or self._clear_requested or not outs
                or (sch.waiting and len(sch.running) < sch.max_concurrency) or len(outs) != len(sch.running)):  # fmt: skip
            return False
        for o in outs:
            seq, p = o.seq, o.seq.params
            if seq.in_prefill or seq.grammar is not None or p.stop:  # (land left out lanes finished meanwhile)
                return False
            if any((t in self.eos and not p.ignore_eos) or t in p.stop_token_ids for t in o.token_ids):
                return False
            n = len(o.token_ids)
            if len(seq.output_ids) + n >= p.max_tokens or seq.num_tokens + n >= self.ecfg.max_context:
                return False
        return True

    def _count_tokens(self, seq: Sequence, toks: list[int], now: float) -> None:
        """A round's tokens into the output ahead of their text (`_accept_tokens(..., counted=True)` follows)."""
        if not seq.output_ids:
            seq.first_token = now
        seq.last_token = now
        seq.output_ids += toks
        self.tokens_generated += len(toks)

    def _chain(self, prev: AheadStep) -> AheadStep | None:
        """The next decode step queued behind `prev` before its tokens are read, when every running lane only
        decodes (can_run_ahead) and no queued request could take a free lane; else None. A lane whose token in
        `prev` is its last by length sits it out (it finishes when that token is read)."""
        sch = self.scheduler
        if sch.waiting and len(sch.running) < sch.max_concurrency:
            return None
        inflight = {id(s) for s in prev.seqs}
        chunks = []
        for s in sch.running:
            if id(s) not in inflight or s.in_prefill:
                return None
            if len(s.output_ids) + 1 >= s.params.max_tokens or s.num_tokens + 1 >= self.ecfg.max_context:
                continue
            chunks.append(ScheduledChunk(s, 1, True))
        if not self._ahead_ok(chunks):
            return None
        return self.runner.launch(chunks, prev, keep_hidden=self.spec is not None)

    def _ahead_ok(self, chunks: list[ScheduledChunk]) -> bool:
        """Whether these chunks run as a decode step queued ahead of reading its tokens: decode ahead on, the runner
        takes them (can_run_ahead), and with --spec only while adaptive speculation keeps to plain steps (decided
        one step back; the step keeps its hidden rows for the drafter, SpecDecoder.landed)."""
        return (self._runs_ahead and (self.spec is None or self.spec.runs_plain(chunks))
                and self.runner.can_run_ahead(chunks))  # fmt: skip

    def _land(self, step: AheadStep) -> list[TokenEvent]:
        """Read a step run ahead and take its tokens, as the end of a plain step would (a lane that finished or
        was aborted meanwhile drops its token). A lane already in the next step has its cached length one past
        its tokens: the prefix cache gets this token as the next step's input (`ahead`), as a speculative
        round's accepted drafts."""
        ids, lps, tops = step.read()
        now = time.monotonic()
        live = [i for i, s in enumerate(step.seqs) if s.status is Status.RUNNING]
        if self.prefix is not None:
            self.prefix.after_step([step.seqs[i] for i in live], {id(step.seqs[i]): [ids[i]] for i in live})
        events = [self._accept_tokens(step.seqs[i], [ids[i]], [lps[i]], [tops[i]], now) for i in live]
        if self.spec is not None:  # the drafter is fed the step's positions, as after a plain step of its own
            self.spec.landed(step.seqs, step.starts, ids, step.hidden)
        return events

    def _accept_tokens(self, seq: Sequence, toks: list[int], lps: list, tops: list, now: float,
                       counted: bool = False) -> TokenEvent:  # fmt: skip
        """Append tokens one at a time under the stop rules; the ones after a stop are dropped. `counted`: the
        tokens are in the output already (`_count_tokens`) and none of them can stop it: their text and event."""
        first = len(seq.output_ids) == len(toks) if counted else not seq.output_ids
        if first and not counted:
            seq.first_token = now
        seq.last_token = now
        p = seq.params
        finish, stop_reason, text, n = None, None, "", 0
        for i, tok in enumerate(toks):
            if not counted:
                seq.output_ids.append(tok)
                self.tokens_generated += 1
            n += 1
            if (tok in self.eos and not p.ignore_eos) or tok in p.stop_token_ids:
                finish, stop_reason = "stop", tok
            delta = "" if finish else seq.detok.add([tok])
            # the grammar is complete: only a stop token could follow. Its matcher has taken all of `toks` (a
            # speculative round is cut where its grammar completes): only the last token can complete it
            if (finish is None and i == len(toks) - 1 and seq.grammar is not None
                    and seq.grammar.must_stop(self.runner.sampler.vocab_size)):  # fmt: skip
                finish = "stop"
            full = len(seq.output_ids) >= p.max_tokens or seq.num_tokens >= self.ecfg.max_context
            if finish is None and full:
                finish = "length"
            if finish is not None:
                delta += seq.detok.flush()
            piece, hit = seq.stop_matcher.feed(delta)
            if hit is not None:
                finish, stop_reason = "stop", hit
            elif finish is not None:
                piece += seq.stop_matcher.flush()
            text += piece
            if finish is not None:
                break
        seq.text += text
        ev = TokenEvent(
            seq.request_id, toks[:n], text,
            logprobs=None if lps[0] is None else lps[:n], top_logprobs=None if tops[0] is None else tops[:n],
        )  # fmt: skip
        if first:  # known from admission on: a stream's opening usage can name its cache reads
            ev.cached_tokens = seq.cached_tokens
        if first and seq.prompt_logprobs is not None:
            ev.prompt_logprobs, ev.prompt_top_logprobs = seq.prompt_logprobs, seq.prompt_top_logprobs
            ev.prompt_ranks = seq.prompt_ranks
        if finish is not None:
            self._finish(seq, finish, stop_reason, ev)
        return ev

    def _finish(self, seq: Sequence, reason: str, stop_reason, ev: TokenEvent) -> None:
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        self.scheduler.finish(seq)
        self._by_id.pop(seq.request_id, None)
        self.finished_count += 1
        ev.finish_reason, ev.stop_reason = reason, stop_reason
        ev.usage = Usage(len(seq.prompt_ids), len(seq.output_ids), seq.cached_tokens)
        ev.timings = self._timings(seq)
        if self.spec is not None:
            self.spec.note_finished(seq)

    def _final(self, seq: Sequence, reason: str, text: str) -> TokenEvent:
        ev = TokenEvent(seq.request_id, [], text)
        self._finish(seq, reason, None, ev)
        return ev

    def _drop_aborted(self) -> list[TokenEvent]:
        events = []
        ids = set()
        while self._aborted:  # deque.popleft is atomic: aborts from other threads are never lost
            ids.add(self._aborted.popleft())
        for rid in ids:
            seq = self._by_id.get(rid)
            if seq is not None:
                events.append(self._final(seq, "abort", ""))
            elif len(self._early_aborts) < 4096:
                self._early_aborts.add(rid)
        return events

    @staticmethod
    def _timings(seq: Sequence) -> Timings:
        end = time.monotonic()
        admitted = seq.admitted or end
        first = seq.first_token or end
        n = len(seq.output_ids)
        decode = (seq.last_token - first) if seq.last_token else 0.0
        return Timings(
            queue_s=admitted - seq.arrival,
            prefill_s=first - admitted,
            decode_s=decode,
            per_token_s=decode / max(1, n - 1),
            spec_drafted=seq.spec_drafted,
            spec_accepted=seq.spec_accepted,
        )

    def stats(self) -> EngineStats:
        sch = self.scheduler
        return EngineStats(
            lanes_total=sch.max_concurrency,
            lanes_busy=len(sch.running),
            queue_depth=len(sch.waiting),
            pages_total=sch.pages.capacity,
            pages_free=sch.pages.num_free,
            slots_total=sch.slots.capacity,
            slots_free=sch.slots.num_free,
            requests_finished=self.finished_count,
            tokens_generated=self.tokens_generated,
            prompt_tokens=self.prompt_tokens,
            broken=self.runner.broken,
            extra=(self.spec.counters() if self.spec is not None else {})
            | (self.prefix.counters() if self.prefix is not None else {})
            | self.runner.sampler.grammar_counters.as_dict(),
        )
