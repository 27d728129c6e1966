"""PrefixReuse: the prefix cache as the engine runs it (docs/prefix-cache.md).

- At admission (`lookup`, `take`): the longest run of the prompt's full pages that is cached AND ends where a
  GDN checkpoint exists, leaving at least one prompt token to compute (the last token's logits are needed). The
  request shares those pages (reference counts), pins the checkpoint, and starts at that page boundary.
- Before its first step (`restore`): the checkpoint is copied into the request's GDN slot (others are zeroed).
- After every step (`after_step`): pages that just became full are named, and the GDN state is saved where a
  later request is likely to resume: the prompt's last page boundary (and the one before when the prompt ends
  on a boundary) and the boundary where the prompt leaves an earlier prompt's cached pages, and the latest page
  boundary of the generated text (one moving checkpoint per request, so a finished answer leaves the state at
  its end). A prompt boundary inside a prefill chunk is saved during the step instead (`place_saves` reserves
  the slot before it, the GDN layers copy the state there mid-chunk): one step, not two, for a turn whose new
  tokens cross the last page boundary.
- With a host tier (`host`, host_tier.py): a checkpoint evicted from the device slots is spilled to host
  memory, and a hit whose checkpoint is only there restores it from host into the request's slot. With a host
  tier of KV pages (`host_pages`, host_tier.py) an evicted named page is spilled too, and a prompt's chain
  continues past the pages still on the device into pages on the host, copied into pages it allocates anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.host_tier import HostTier
from hinfer.engine.prefix_cache import ROOT, PagePool, chain_hashes
from hinfer.engine.sequence import ScheduledChunk, Sequence


@dataclass(frozen=True)
class Hit:
    pages: list[int]  # cached pages the request reuses, in order
    tokens: int  # len(pages) * page_size
    name: bytes | None  # the checkpoint at the end of those pages
    matched: int = 0  # leading prompt pages whose KV is cached (the checkpoint may end earlier)
    host: bool = False  # the checkpoint is in host memory only (spilled)
    host_pages: tuple[bytes, ...] = ()  # names of the hit's pages after `pages`, copied back from host rows


class PrefixReuse:
    def __init__(self, pages: PagePool, checkpoints: CheckpointPool, state, page_size: int,
                 host: HostTier | None = None, host_pages: HostTier | None = None,
                 turn_start: int | None = None) -> None:  # fmt: skip
        self.pages = pages
        self.turn_start = turn_start  # the token that opens a chat turn (<|im_start|>), if the tokenizer has one
        self.checkpoints = checkpoints
        self.state = state  # ModelState: copy_slots / reset_slots
        self.page_size = page_size
        self.host = host
        self.host_pages = host_pages
        pages.on_evict = self._page_gone  # a checkpoint whose last page is gone can never be reached
        if host is not None:
            checkpoints.on_evict = host.spill  # runs before the evicted slot is overwritten
        if host_pages is not None:
            pages.on_spill = host_pages.spill  # runs when the page is handed out, before anything writes it
            host_pages.on_evict = lambda name, _row: self._page_gone(name)
        self.requests = self.hit_requests = 0
        self.query_tokens = self.hit_tokens = 0
        self._saving: list[bytes] = []  # checkpoints written during the current step, pinned until it ends

    # ---- admission -----------------------------------------------------------------------------------------
    def lookup(self, seq: Sequence) -> Hit:
        ps = self.page_size
        if seq.page_hashes is None:
            seq.page_hashes = chain_hashes(seq.tokens_between(0, len(seq.prompt_ids)), ps)
        usable = min(len(seq.page_hashes), (len(seq.prompt_ids) - 1) // ps)  # at least one token to compute
        if seq.params.prompt_logprobs is not None:  # cached tokens are not run: they would have no logits
            usable = 0
        names = seq.page_hashes
        found = self.pages.match(names[:usable])
        d = len(found)
        total = d + (self.host_pages.match(names[d:usable]) if self.host_pages is not None else 0)
        for k in range(total, 0, -1):
            name = names[k - 1]
            on_host = self.host is not None and name in self.host
            if name in self.checkpoints or on_host:
                return Hit(found[:k], k * ps, name, total, host=name not in self.checkpoints,
                           host_pages=tuple(names[d:k]))
        return Hit([], 0, None, total)

    def take(self, seq: Sequence, hit: Hit) -> list[int]:
        """Admit with `hit`: share its pages, pin its checkpoint, start past it. -> the shared pages."""
        self.pages.acquire(hit.pages)
        if hit.name is not None:
            (self.host if hit.host else self.checkpoints).pin(hit.name)
        seq.restore_from, seq.restore_host = hit.name, hit.host
        for name in hit.host_pages:  # copied into the first pages the scheduler allocates next (restore)
            self.host_pages.pin(name)
        seq.restore_pages = list(hit.host_pages)
        seq.num_cached = seq.cached_tokens = hit.tokens
        seq.pages_named = len(hit.pages) + len(hit.host_pages)
        seq.ckpt_targets = self._targets(seq, hit.matched * self.page_size)
        self.requests += 1
        self.query_tokens += len(seq.prompt_ids)
        self.hit_requests += int(hit.tokens > 0)
        self.hit_tokens += hit.tokens
        return list(hit.pages)

    def _targets(self, seq: Sequence, branch: int) -> list[int]:
        """Prompt positions to checkpoint: the last page boundary, and the one before it when the prompt ends on a
        boundary (so resending the same prompt, which must compute its last token, finds one too); `branch`,
        where this prompt leaves the cached pages of an earlier one (a head they share, such as a system prompt,
        that the next request with that head can then resume from); and the page boundary before the last turn
        ahead of the answer's: the next request may resend the conversation without that turn (an edited last
        message, or the instruction a forced tool choice puts there, docs/prefix-cache.md)."""
        ps, n = self.page_size, len(seq.prompt_ids)
        out = []
        for t in sorted({(n - 1) // ps * ps, n // ps * ps, branch, self._last_turn(seq.prompt_ids) // ps * ps}):
            if t > seq.num_cached and seq.page_hashes[t // ps - 1] not in self.checkpoints:
                out.append(t)
        return out

    def _last_turn(self, ids: list[int]) -> int:
        """Where the turn before the prompt's last one begins (0 without two turn openers)."""
        if self.turn_start is None:
            return 0
        back = ids[::-1]  # searched from the end: the last turns are short next to a long conversation
        try:
            return len(ids) - 1 - back.index(self.turn_start, back.index(self.turn_start) + 1)
        except ValueError:
            return 0

    def restore(self, seqs: list[Sequence]) -> None:
        """GDN slots of newly admitted requests: their checkpoint copied in, or zeros."""
        src, dst, zero, host_names, host_dst = [], [], [], [], []
        for s in seqs:
            if s.restore_from is None:
                zero.append(s.slot)
            elif s.restore_host:
                host_names.append(s.restore_from)
                host_dst.append(s.slot)
            else:
                src.append(self.checkpoints.slot_of(s.restore_from))
                dst.append(s.slot)
        self.state.copy_slots(src, dst)
        self.state.reset_slots(zero)
        if host_names:
            self.host.restore(host_names, host_dst)
        for s in seqs:
            if s.restore_pages:
                self._restore_pages(s)
            self.forget(s)

    def _restore_pages(self, seq: Sequence) -> None:
        """Host KV rows into the pages allocated right after the shared ones, named again (a page whose name
        another request registered meanwhile stays private: same content, no harm)."""
        names = seq.restore_pages
        first = seq.pages_named - len(names)
        targets = seq.pages[first : first + len(names)]
        self.host_pages.restore(names, targets)
        for page, name in zip(targets, names):
            self.pages.register(page, name)
    def forget(self, seq: Sequence) -> None:
        """A request leaves: drop a pin it still holds (finished before its first step)."""
        if seq.restore_from is not None:
            (self.host if seq.restore_host else self.checkpoints).unpin(seq.restore_from)
            seq.restore_from, seq.restore_host = None, False
        for name in seq.restore_pages:
            self.host_pages.unpin(name)
        seq.restore_pages = []

    # ---- each step -----------------------------------------------------------------------------------------
    def place_saves(self, chunks: list[ScheduledChunk]) -> None:
        """Before a step: a slot for each checkpoint the scheduler placed inside a chunk (`save_at`), reserved and
        pinned for the step. A state saved already needs none; with every slot pinned the chunk ends there
        instead, and after_step saves it (or spills it to the host tier) as at any chunk's end."""
        for c in chunks:
            if c.save_at is None:
                continue
            s = c.seq
            name = s.page_hashes[(s.num_cached + c.save_at) // self.page_size - 1]
            known = name in self.checkpoints
            slot = self.checkpoints.reserve(name)
            if slot is None:
                if not known:
                    c.num_tokens, c.samples = c.save_at, False
                c.save_at = None
                continue
            self.checkpoints.pin(name)
            self._saving.append(name)
            c.save_slot = slot

    def after_step(self, seqs: list[Sequence], ahead: dict[int, list[int]] | None = None) -> None:
        """Name the pages that became full this step and save GDN checkpoints (one batched copy). `ahead`
        (speculative rounds): per id(seq), the round's tokens not yet in its output, the accepted drafts among
        them already cached (their KV is computed from those tokens, whatever the stop rules then keep)."""
        ps = self.page_size
        for name in self._saving:  # written during the step
            self.checkpoints.unpin(name)
        self._saving = []
        src, dst, saving = [], [], []
        for s in seqs:
            self._name_pages(s, (ahead or {}).get(id(s), []))
            n = s.num_cached
            if n == 0 or n % ps:
                continue
            name = s.page_hashes[n // ps - 1]
            if n <= len(s.prompt_ids):
                if n not in s.ckpt_targets:
                    continue
            elif s.decode_ckpt is not None and s.decode_ckpt != name:
                self._drop(s.decode_ckpt)  # one moving checkpoint per request's generated text
                s.decode_ckpt = None
            known = name in self.checkpoints
            slot = self.checkpoints.reserve(name)
            if slot is None:
                if not known and self.host is not None:  # every device slot is held this step: straight to host
                    self.host.spill(name, s.slot)
                    if n > len(s.prompt_ids):
                        s.decode_ckpt = name
                continue
            # pinned until the copy below: a later reserve in this loop must not evict (and spill, or reuse
            # the slot of) a checkpoint whose state is not copied yet
            self.checkpoints.pin(name)
            saving.append(name)
            if n > len(s.prompt_ids):
                s.decode_ckpt = name
            src.append(s.slot)
            dst.append(slot)
        self.state.copy_slots(src, dst)
        for name in saving:
            self.checkpoints.unpin(name)

    def _page_gone(self, name: bytes) -> None:
        """A named page left the device or the host tier: its checkpoint goes unless the page is still held on
        the other one."""
        if self.pages.holds(name) or (self.host_pages is not None and name in self.host_pages):
            return
        self._drop(name)

    def _drop(self, name: bytes) -> None:
        """Forget a checkpoint on both tiers (its last page is evicted, or a newer one replaces it)."""
        self.checkpoints.discard(name)
        if self.host is not None:
            self.host.discard(name)

    def _name_pages(self, seq: Sequence, ahead: list[int]) -> None:
        ps = self.page_size
        full = seq.num_cached // ps
        names = seq.page_hashes
        if len(names) < full:
            start = len(names) * ps
            known = seq.num_tokens  # prompt + output; positions past it are the round's tokens `ahead`
            ids = seq.tokens_between(start, min(full * ps, known)) + ahead[max(0, start - known) : max(0, full * ps - known)]
            names += chain_hashes(ids, ps, names[-1] if names else ROOT)
        for j in range(seq.pages_named, full):
            self.pages.register(seq.pages[j], names[j])
        seq.pages_named = max(seq.pages_named, full)

    # ---- upkeep --------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop every cached page and checkpoint not in use."""
        self.pages.clear()
        self.checkpoints.clear()
        if self.host is not None:
            self.host.clear()
        if self.host_pages is not None:
            self.host_pages.clear()

    def spill_all(self) -> None:
        """Move every checkpoint and named page that no request uses off the device: into the host tiers where
        there are ones (what eviction under churn does one at a time, through the same spills), dropped
        otherwise. Checkpoints go first, so a page leaving without a host tier takes its checkpoint along."""
        self.checkpoints.evict_all()
        self.pages.evict_cached()

    def counters(self) -> dict[str, float]:
        return {
            "prefix_requests": self.requests,
            "prefix_hit_requests": self.hit_requests,
            "prefix_query_tokens": self.query_tokens,
            "prefix_hit_tokens": self.hit_tokens,
            "prefix_hit_rate": self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
            "prefix_cached_pages": self.pages.num_cached,
            "prefix_evicted_pages": self.pages.evictions,
            "prefix_checkpoints": len(self.checkpoints),
            "prefix_checkpoint_slots": self.checkpoints.capacity,
            "prefix_evicted_checkpoints": self.checkpoints.evictions,
        } | (self._host_counters() if self.host is not None else {}) | self._host_page_counters()

    def _host_counters(self) -> dict[str, float]:
        h = self.host
        return {
            "prefix_host_checkpoints": len(h),
            "prefix_host_checkpoint_slots": h.capacity,
            "prefix_host_spills": h.spills,
            "prefix_host_restores": h.restores,
            "prefix_host_evictions": h.evictions,
        }

    def _host_page_counters(self) -> dict[str, float]:
        h = self.host_pages
        if h is None:
            return {}
        return {
            "prefix_host_kv_pages": len(h),
            "prefix_host_kv_page_slots": h.capacity,
            "prefix_host_kv_spills": h.spills,
            "prefix_host_kv_restores": h.restores,
            "prefix_host_kv_evictions": h.evictions,
        }
