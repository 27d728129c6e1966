"""CUDA graphs for steps of a fixed shape: B lanes x t tokens each, one captured forward per lane-count bucket.

Three uses, one mechanism (`StepGraphs`):
  decode   t = 1, the target model + logits (ModelRunner);
  verify   t = K + 1, the target model over [pending token, K drafts] with the GDN state after each position
           written to the lane's draft slots, logits for every row (SpecDecoder);
  mtp      the MTP head over t rows per lane: t = 1 for its single-token draft steps, t = K + 1 for the pass
           over a round's accepted positions (MTPDrafter).
A step of B lanes copies its metadata into static buffers (padded to the bucket size), replays the graph and
reads the rows of the real lanes. Padding: a lane with n < t real tokens gets t - n filler tokens after its real
ones (causal attention and the sequential GDN scan keep them from touching the real rows), whose KV rows go to
the reserved scratch page 0 and whose GDN states go to the reserved scratch slot 0; padded lanes are all filler.
Kernels read lengths from device tensors, so one capture serves every context length. All graphs share one
memory pool: replays never overlap, and each graph's outputs stay referenced, so none overwrites another's.

Without CUDA (or with capture=False) `run` executes the same padded static batch eagerly, its outputs copied into
static buffers as a replay leaves them: the CPU tests check the staging and padding against the unpadded path that
way, and that no caller keeps an output past the next replay of its graph.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref
from collections.abc import Callable

import torch

from hinfer.batch import ForwardBatch, SeqChunk
from hinfer.engine.host_memory import release_deferred
from hinfer.engine.sampler import to_device
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import ModelState
from hinfer.ops.row_shift import shift_rows

log = logging.getLogger("hinfer.graphs")

# Every lane count to 8 has its own graph: a padded lane costs little in a dense layer, but its tokens are routed
# through the experts like real ones (three lanes run as four cost the MoE models 10-14%).
BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
WIDTH_CLASSES = (4096, 32768)  # context lengths (tokens) with their own narrower graphs, besides max_context
SCRATCH_PAGE = SCRATCH_SLOT = 0  # reserved by the state pool: filler tokens write here, nothing reads it
HOST_BUFFERS: int | None = None  # pinned staging buffers per field set (None: 2 on a GPU, 1 on a CPU; tests set 2)

# One graph memory pool per engine (its ModelState): the decode, verify and MTP graphs of an engine run one at
# a time, so they share one pool. A pool dies with its engine: capturing into a pool whose graphs were all
# freed trips the caching allocator, and a later engine in the same process (a bench sweep) starts a new one.
_POOLS: weakref.WeakKeyDictionary[ModelState, object] = weakref.WeakKeyDictionary()


def shared_pool(state: ModelState) -> object:
    """The graph memory pool of the engine that owns `state`."""
    if state not in _POOLS:
        _POOLS[state] = torch.cuda.graph_pool_handle()
    return _POOLS[state]


def page_widths(max_context: int, page_size: int) -> list[int]:
    """Page-table widths with their own graphs: the split-KV attention grid scales with the width, so a server
    configured for 128K contexts would otherwise launch 128K worth of (empty) splits for short ones."""
    full = -(-max_context // page_size)
    return sorted({min(full, -(-w // page_size)) for w in WIDTH_CLASSES} | {full})


class StepGraphs:
    def __init__(
        self,
        model: Qwen35ForCausalLM,
        state: ModelState,
        max_lanes: int,
        max_pages_per_seq: int,
        tokens_per_lane: int = 1,
        head: str = "target",  # "target" (model + logits) | "mtp" (MTP head hidden states)
        verify: bool = False,  # write the GDN state after each position to the chunk's gdn_step_slots
        tail: Callable[[torch.Tensor], torch.Tensor] | None = None,  # "mtp": an op on its output, captured too
    ) -> None:
        self.model, self.state, self.head, self.verify, self.tail = model, state, head, verify, tail
        self.device = state.k_cache.device
        self.t = tokens_per_lane
        self.buckets = [b for b in BUCKETS if b < max_lanes] + [max_lanes]
        n, self.width = max(self.buckets), max_pages_per_seq
        nt = n * self.t
        # Static inputs live in two device tensors (int64 and int32 fields) staged from two pinned host tensors:
        # two H2D copies per step. numpy views make the host-side writes cheap.
        i64 = {"input_ids": nt, "positions": nt, "slot_mapping": nt, "gdn_slots": n}
        if verify:
            i64["step_slots"] = nt
        self._i64 = _Packed(i64, torch.int64, self.device)
        self._i32 = _Packed({"q_lens": n, "cu_q_lens": n + 1, "cached_lens": n, "page_table": n * self.width},
                            torch.int32, self.device)  # fmt: skip
        self._i32.fill("q_lens", self.t)
        self._i32.fill("cu_q_lens", range(0, (n + 1) * self.t, self.t))
        self.logits_indices = torch.arange(nt, dtype=torch.int64, device=self.device)
        self.hidden_in = None
        if head == "mtp":
            self.hidden_in = torch.zeros((nt, model.cfg.hidden_size), dtype=model.embed_tokens.dtype,
                                         device=self.device)  # fmt: skip
        # per host buffer of the int32 fields: the page list object staged in each of its page-table rows
        self._rows: list[list[object]] = [[None] * n for _ in range(self._i32.buffers)]
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, ...]] = {}

    def _batch(self, b: int) -> ForwardBatch:
        a, c, nt = self._i64.dev, self._i32.dev, b * self.t
        return ForwardBatch(
            input_ids=a["input_ids"][:nt],
            positions=a["positions"][:nt],
            q_lens=c["q_lens"][:b],
            cu_q_lens=c["cu_q_lens"][: b + 1],
            cached_lens=c["cached_lens"][:b],
            page_table=c["page_table"].view(-1, self.width)[:b],
            slot_mapping=a["slot_mapping"][:nt],
            gdn_slots=a["gdn_slots"][:b],
            logits_indices=self.logits_indices[: nt if self.head == "target" else 0],
            page_size=self.state.page_size,
            q_lens_cpu=[self.t] * b,
            cached_lens_cpu=self._i32.host["cached_lens"][:b].tolist(),  # the eager reference ops read it
            gdn_step_slots=a["step_slots"][:nt].view(b, self.t) if self.verify else None,
        )

    def _forward(self, b: int) -> tuple[torch.Tensor, ...]:
        batch = self._batch(b)
        if self.head == "mtp":
            assert self.hidden_in is not None
            h = self.model.mtp_forward(batch.input_ids, self.hidden_in[: b * self.t], batch, self.state)
            return (h,) if self.tail is None else (h, self.tail(h))
        hidden = self.model(batch, self.state)
        return hidden, self.model.compute_logits(hidden[batch.logits_indices])

    def fits(self, chunks: list[SeqChunk]) -> bool:
        """Whether this graph set can run these chunks: few enough lanes, tokens and pages, no GDN state saved
        inside a chunk, no image rows or per-axis positions (eager only)."""
        if len(chunks) > self.buckets[-1] or any(c.gdn_save is not None or c.axis_positions is not None
                                                 or c.image_rows for c in chunks):  # fmt: skip
            return False
        ps = self.state.page_size
        return all(len(c.token_ids) <= self.t and (c.cached_len + self.t - 1) // ps < self.width for c in chunks)

    def _stage(self, chunks: list[SeqChunk], b: int, hidden: torch.Tensor | None = None) -> None:
        """Write the real lanes' metadata into the static buffers, fillers as the module docstring says."""
        self._i64.next()
        self._i32.next()
        a, c, ps, t = self._i64.host, self._i32.host, self.state.page_size, self.t
        staged = self._rows[self._i32.index]
        ids, pos, kv, steps = a["input_ids"], a["positions"], a["slot_mapping"], a.get("step_slots")
        for i, ch in enumerate(chunks):
            n, p0, r = len(ch.token_ids), ch.cached_len, i * t
            ids[r : r + n] = ch.token_ids
            ids[r + n : r + t] = ch.token_ids[-1]
            pos[r : r + t] = range(p0 + ch.rope_delta, p0 + ch.rope_delta + t)  # text after images is shifted
            if n == 1:  # decode: a scalar write (this loop is on every step's host path)
                kv[r] = ch.page_ids[p0 // ps] * ps + p0 % ps
            else:
                kv[r : r + n] = [ch.page_ids[p // ps] * ps + p % ps for p in range(p0, p0 + n)]
            kv[r + n : r + t] = SCRATCH_PAGE * ps
            if steps is not None:
                steps[r : r + n] = ch.gdn_step_slots if ch.gdn_step_slots is not None else ch.gdn_slot
                steps[r + n : r + t] = SCRATCH_SLOT
        m = len(chunks)
        a["gdn_slots"][:m] = [ch.gdn_slot for ch in chunks]
        a["gdn_slots"][m:] = SCRATCH_SLOT
        ids[m * t :] = pos[m * t :] = 0
        kv[m * t :] = SCRATCH_PAGE * ps
        if steps is not None:
            steps[m * t :] = SCRATCH_SLOT
        c["cached_lens"][:m] = [ch.cached_len for ch in chunks]
        c["cached_lens"][m:] = 0
        table = c["page_table"].reshape(-1, self.width)
        for i, ch in enumerate(chunks):
            if staged[i] is not ch.page_ids:  # a lane's pages are fixed for its life: restage on change only
                ids_ = ch.page_ids[: self.width]  # the caller picks a width that covers the pages in use
                table[i, : len(ids_)] = ids_
                table[i, len(ids_) :] = 0
                staged[i] = ch.page_ids
        for i in range(m, b):
            if staged[i] is not None:
                table[i] = 0
                staged[i] = None
        self._i64.upload()
        self._i32.upload()
        if hidden is not None:
            assert self.hidden_in is not None
            lens = [len(ch.token_ids) for ch in chunks]
            if all(n == t for n in lens):
                self.hidden_in[: m * t].copy_(hidden)
            else:  # each lane's rows at i * t; fillers keep whatever was there
                rows = to_device([i * t + j for i, n in enumerate(lens) for j in range(n)], torch.int64, self.device)
                self.hidden_in.index_copy_(0, rows, hidden)

    @torch.inference_mode()
    def capture(self, pool: object | None = None) -> None:
        t0 = time.monotonic()
        gc.collect()  # finalizers of dead engines (host unpinning) must not run inside the capture
        pool = pool if pool is not None else shared_pool(self.state)
        # split over ranks, the graphs hold NCCL collectives, whose watchdog thread queries the events of earlier
        # collectives while this thread captures: only this thread's calls may end the capture
        mode = "thread_local" if self.model.tp.size > 1 else "global"
        for b in sorted(self.buckets, reverse=True):
            self._stage([], b)
            for _ in range(2):  # warm up: Triton autotune/compile outside the capture
                self._forward(b)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, capture_error_mode=mode):
                out = self._forward(b)
            self.graphs[b], self.outputs[b] = g, out
        torch.cuda.synchronize()
        release_deferred()
        kind = "verify" if self.verify else self.head + (" + tail" if self.tail is not None else "")
        log.info("captured %d %s graphs (lanes %s, %d tokens/lane, %d pages) in %.1f s", len(self.graphs), kind,
                 self.buckets, self.t, self.width, time.monotonic() - t0)  # fmt: skip

    def bucket(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)

    def run(self, chunks: list[SeqChunk], hidden: torch.Tensor | None = None, ids: torch.Tensor | None = None,
            drafts: torch.Tensor | None = None, shift: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:  # fmt: skip
        """Outputs for the padded batch: (hidden [B*t, H], logits [B*t, V]) for the target, (mtp hidden
        [B*t, H],) for the MTP head (and its tail's output after it, if it has one); lane i's rows start at i * t.
        `hidden`: the MTP head's input rows, the chunks' rows concatenated. `ids` (t tokens per lane): the lanes'
        input tokens as a device tensor, in place of the chunks' token_ids, so a step can follow one whose tokens
        the host has not read; `drafts` [lanes, w] likewise for rows 1..w of each lane (verification: a lane's
        drafts after its pending token; past a lane's own drafts they land in filler rows, which nothing reads).
        `shift` [lanes] (one token per lane): each lane's row moves that many positions on, a count the host has not
        read (the chunks are staged as if it were 0; their pages must cover the shifted rows).
        Replays the captured graph, or runs the static batch eagerly if none."""
        b = self.bucket(len(chunks))
        assert b is not None
        self._stage(chunks, b, hidden)
        if shift is not None:
            self._shift(len(chunks), shift)
        if ids is not None:
            assert len(ids) == len(chunks) * self.t
            self._i64.dev["input_ids"][: len(ids)].copy_(ids)
        if drafts is not None:
            w = min(drafts.shape[1], self.t - 1)
            assert len(drafts) == len(chunks)
            self._i64.dev["input_ids"].view(-1, self.t)[: len(chunks), 1 : 1 + w].copy_(drafts[:, :w])
        if b not in self.graphs:  # eager, into static outputs as a replay's: what a caller keeps, it must copy
            out = self._forward(b)
            if b not in self.outputs:
                self.outputs[b] = tuple(torch.empty_like(o) for o in out)
            for o, x in zip(self.outputs[b], out):
                o.copy_(x)
            return self.outputs[b]
        self.graphs[b].replay()
        return self.outputs[b]

    def _shift(self, m: int, shift: torch.Tensor) -> None:
        """Move the m real lanes' rows (t = 1) `shift` positions on, on the device after the upload: the position,
        the cached length and the KV slot (looked up in the lane's page-table row) follow."""
        assert self.t == 1 and len(shift) == m
        a, c = self._i64.dev, self._i32.dev
        shift_rows(a["positions"], c["cached_lens"], a["slot_mapping"], c["page_table"].view(-1, self.width), shift,
                   self.state.page_size)  # fmt: skip


class _Packed:
    """Named int fields packed in pinned host tensors and one device tensor of the same layout. Two host buffers
    taken in turn (one on a CPU, where the device tensor is the host one): the host stages step s + 1 in one
    while step s's upload from the other may still be queued, so it can run a step ahead of the GPU through
    chains of small steps (the drafter's) without waiting for the previous upload to leave."""

    def __init__(self, sizes: dict[str, int], dtype: torch.dtype, device: torch.device) -> None:
        total = sum(sizes.values())
        self._on_gpu = on_gpu = torch.device(device).type == "cuda"
        self.buffers = HOST_BUFFERS or (2 if on_gpu else 1)
        bufs = [torch.zeros(total, dtype=dtype, pin_memory=on_gpu) for _ in range(self.buffers)]
        self._bufs = bufs
        self._dev = bufs[0] if self.buffers == 1 and not on_gpu else torch.zeros(total, dtype=dtype, device=device)
        self._uploaded: list[torch.cuda.Event | None] = [None] * self.buffers
        self._views: list[dict] = []
        self.dev, off = {}, 0
        for name, size in sizes.items():
            self.dev[name] = self._dev[off : off + size]
            off += size
        for buf in bufs:
            arr, off, views = buf.numpy(), 0, {}
            for name, size in sizes.items():
                views[name] = arr[off : off + size]
                off += size
            self._views.append(views)
        self.index = 0
        self.host = self._views[0]

    def fill(self, name: str, values) -> None:
        """A field's constant value, in every host buffer."""
        for views in self._views:
            views[name][:] = values

    def next(self) -> None:
        """Before the host writes a step's fields: take the next host buffer, once its last upload has left it
        (it may still be queued when the caller did not wait for the GPU since, as the drafter's steps do not).
        Every field a step reads is rewritten each step, but for the page-table rows its owner tracks per
        buffer (`index`)."""
        self.index = (self.index + 1) % self.buffers
        self.host = self._views[self.index]
        ev = self._uploaded[self.index]
        if ev is not None:
            ev.synchronize()

    def upload(self) -> None:
        if self._dev is self._bufs[0]:
            return
        self._dev.copy_(self._bufs[self.index], non_blocking=True)
        if self._on_gpu:
            ev = self._uploaded[self.index] or torch.cuda.Event()
            ev.record()
            self._uploaded[self.index] = ev


def pick(graph_sets: list[StepGraphs] | None, chunks: list[SeqChunk]) -> StepGraphs | None:
    """The narrowest graph set that fits the chunks, if any."""
    return next((g for g in graph_sets or [] if g.fits(chunks)), None)


def build(
    make: Callable[[int], StepGraphs], max_context: int, page_size: int, capture: bool
) -> list[StepGraphs]:
    """One graph set per page-table width (narrowest first), captured when asked."""
    sets = [make(w) for w in page_widths(max_context, page_size)]
    if capture:
        for s in sets:
            s.capture()
    return sets
