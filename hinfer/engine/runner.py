"""ModelRunner: turn scheduled chunks into one ForwardBatch, run the model, sample the lanes that need a token.

Owns the model, the ModelState and the sampler. The only host sync of a step is reading the sampled ids.
A plain decode step can also run ahead (`launch`): its input tokens come from the previous step's sampled ids on
the device, so the host queues step s + 1 before it reads step s's tokens and the GPU does not wait for the host
between decode steps (`AheadStep`, EngineCore).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.engine.host_tier import HostTier, tier_tensors
from hinfer.engine.prompt_logprobs import record_prompt_logprobs, wants_prompt_logprobs
from hinfer.engine.protocol import TopLogprob
from hinfer.engine.sampler import SampleOutput, take_rows
from hinfer.engine.sequence import ScheduledChunk, Sequence
from hinfer.model.prompt_logits import prompt_logits
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import ModelState


@dataclass
class AheadStep:
    """A decode step queued on the device whose sampled tokens the host has not read yet: one row per lane of
    `seqs`, on the device in `out` (the next step's input ids) and copied (queued) into `host`. With `hidden`
    (launch's keep_hidden) the lanes' final-normed hidden rows, copied out of the graph's output in stream order
    before any later step overwrites it, and `starts`, each lane's position: what a speculative drafter is fed."""

    seqs: list[Sequence]
    out: SampleOutput
    host: SampleOutput
    ready: torch.cuda.Event | None = None
    hidden: torch.Tensor | None = None
    starts: list[int] | None = None

    def read(self) -> tuple[list[int], list[float | None], list[list[TopLogprob] | None]]:
        """Wait for this step's samples (not for anything queued after it): (ids, logprobs, top logprobs) as
        SampleOutput.to_host gives them."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.host.to_host([s.sampler_state for s in self.seqs])


@dataclass
class StepResult:
    """Per sampled sequence, in order: the token, its logprob and top-N alternatives (None unless asked)."""

    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[TopLogprob] | None]


class ModelRunner:
    runs_ahead = True  # a decode step may take its input ids from the previous step's device tensor

    def __init__(self, model: Qwen35ForCausalLM, state: ModelState, sampler) -> None:
        self.model = model
        self.state = state
        self.sampler = sampler
        self.device = state.k_cache.device
        self.graphs: list | None = None  # decode StepGraphs per page-table width, narrowest first, once captured

    def capture_graphs(self, max_lanes: int, max_context: int, capture: bool = True) -> None:
        """Decode graphs (one token per lane) for a few page-table widths. capture=False keeps the padded static
        batches but runs them eagerly (CPU tests of the staging)."""
        from hinfer.engine.cuda_graphs import StepGraphs, build

        self.graphs = build(lambda w: StepGraphs(self.model, self.state, max_lanes, w), max_context,
                            self.state.page_size, capture)  # fmt: skip

    def forward_logits(self, seq_chunks: list[SeqChunk]) -> torch.Tensor:
        """Logits of the rows that want them: a captured graph for plain decode, the eager model otherwise."""
        if self.graphs and all(c.need_logits for c in seq_chunks):
            from hinfer.engine.cuda_graphs import pick

            g = pick(self.graphs, seq_chunks)
            if g is not None:
                return g.run(seq_chunks)[1][: len(seq_chunks)]
        batch = build_forward_batch(seq_chunks, self.state.page_size, self.device)
        hidden = self.model(batch, self.state)
        if not batch.logits_indices.numel():  # a non-final prompt chunk: no logits wanted
            return hidden.new_empty((0, 0), dtype=torch.float32)
        return self.model.compute_logits(hidden[batch.logits_indices])

    @torch.inference_mode()
    def prompt_logits(self, ids: list[int], page_size: int) -> torch.Tensor:
        """fp32 logits [len(ids), V] of one prompt on a private state (parity checks; LLM.logits)."""
        shape = self.state.shape
        return prompt_logits(self.model, ids, page_size, shape.kv_dtype, shape.v_dtype)

    def host_tier(self, kind: str, rows: int) -> HostTier:
        """A host-RAM tier of the prefix cache over this runner's state (host_tier.tier_tensors: `checkpoints` or
        `pages`), `rows` rows."""
        return HostTier(*tier_tensors(self.state, kind), rows)

    @property
    def broken(self) -> str | None:
        """Why no step can run any more (a tensor-parallel runner whose ranks are out of step); None here."""
        return None

    def close(self) -> None:
        """Let go of what the runner started (a tensor-parallel runner's other ranks; nothing here)."""

    @torch.inference_mode()
    def step(self, chunks: list[ScheduledChunk]) -> StepResult:
        """Run one step; returns sampled tokens for the chunks with `samples` set, in order."""
        seq_chunks = []
        for c in chunks:
            s = c.seq
            toks = s.pending_tokens()[: c.num_tokens]
            seq_chunks.append(SeqChunk(toks, s.num_cached, s.pages, s.slot, need_logits=c.samples,
                                       all_logits=wants_prompt_logprobs(s), gdn_save=c.gdn_save,
                                       **self.image_fields(s, c.num_tokens)))  # fmt: skip
        logits = self.forward_logits(seq_chunks)
        if any(sc.all_logits for sc in seq_chunks):
            logits = self._take_prompt_logprobs(chunks, seq_chunks, logits)
        for c in chunks:
            c.seq.num_cached += c.num_tokens
        sampled = [c.seq for c in chunks if c.samples]
        if not sampled:
            return StepResult([], [], [])
        rows = [s.sampler_state for s in sampled]
        ids, lps, tops = self.sampler.sample(logits, rows).to_host(rows)
        self.sampler.update(rows, ids)
        return StepResult(ids, lps, tops)

    def can_run_ahead(self, chunks: list[ScheduledChunk]) -> bool:
        """Whether `launch` takes these chunks: one decode token per lane through a graph set, and rows whose
        sampling needs nothing from the host's copy of the previous token (a grammar's mask does, and a thinking
        budget's forced end; penalties count the tokens on the device)."""
        if not self.graphs or not chunks or len(chunks) > self.graphs[-1].buckets[-1]:
            return False
        for c in chunks:
            s, r = c.seq, c.seq.sampler_state
            if c.num_tokens != 1 or not c.samples or s.in_prefill or c.save_at is not None or r is None:
                return False
            if r.grammar is not None or r.params.thinking_budget is not None:
                return False
        return True

    @torch.inference_mode()
    def launch(self, chunks: list[ScheduledChunk], prev: AheadStep | None = None,
               keep_hidden: bool = False) -> AheadStep:  # fmt: skip
        """Queue one decode step (can_run_ahead) and its sampling without reading anything back. With `prev`,
        every lane's input token is its sampled id there (the host has not read it); without, the lane's last
        token. The lanes' cached lengths and sampler steps advance now; the tokens join their outputs when the
        caller reads them (AheadStep.read). `keep_hidden`: the step also keeps the lanes' hidden rows (a copy)."""
        from hinfer.engine.cuda_graphs import pick

        seqs = [c.seq for c in chunks]
        ids = None
        if prev is not None:
            row = {id(s): i for i, s in enumerate(prev.seqs)}
            ids = take_rows(prev.out.token_ids, [row[id(s)] for s in seqs])
        seq_chunks = [SeqChunk([0] if ids is not None else s.pending_tokens(), s.num_cached, s.pages, s.slot,
                               **self.image_fields(s, 1)) for s in seqs]  # fmt: skip
        g = pick(self.graphs, seq_chunks)
        assert g is not None, "can_run_ahead: decode lanes fit the widest graph set"
        hidden, logits = g.run(seq_chunks, ids=ids)
        logits = logits[: len(seqs)]
        kept = hidden[: len(seqs)].clone() if keep_hidden else None  # queued before any later replay
        starts = [s.num_cached for s in seqs] if keep_hidden else None
        for s in seqs:
            s.num_cached += 1
        rows = [s.sampler_state for s in seqs]
        out = self.sampler.sample(logits, rows)
        self.sampler.advance(rows, out.token_ids)
        if out.token_ids.device.type == "cpu":
            return AheadStep(seqs, out, out, hidden=kept, starts=starts)
        host = SampleOutput(*(None if t is None else _pinned(t) for t in
                              (out.token_ids, out.logprobs, out.top_ids, out.top_logprobs)))  # fmt: skip
        ready = torch.cuda.Event()
        ready.record()
        return AheadStep(seqs, out, host, ready, kept, starts)

    def image_fields(self, s: Sequence, n: int) -> dict:
        """A prompt with images: its chunk's positions and embeddings, each image encoded once, by the first chunk
        that reaches it (one image's activations at a time); past the prompt, the text shift."""
        images = s.images
        if images is None:
            return {}
        start, end = s.num_cached, s.num_cached + n
        if start >= len(s.prompt_ids):
            return {"rope_delta": images.rope_delta}
        end = min(end, len(s.prompt_ids))
        for i in images.images_in(start, end):
            if i not in images.encoded:
                img = s.image_inputs[i]
                images.set_image(i, self.model.encode_images(img.pixels, [img.grid]))
                s.image_inputs[i] = None  # the pixels are done with
        return images.chunk_fields(start, end)

    @staticmethod
    def _take_prompt_logprobs(chunks: list[ScheduledChunk], seq_chunks: list[SeqChunk],
                              logits: torch.Tensor) -> torch.Tensor:
        """Record the prompt logprobs of the all-logits chunks; -> the rows to sample from (one per sampling
        chunk: the last row of its chunk)."""
        rows, r = [], 0
        for c, sc in zip(chunks, seq_chunks):
            n = len(sc.token_ids) if sc.all_logits else int(sc.need_logits)
            if sc.all_logits:
                record_prompt_logprobs(c.seq, sc.cached_len, logits[r : r + n])
            if c.samples:
                rows.append(r + n - 1)
            r += n
        return logits[rows]


def _pinned(t: torch.Tensor) -> torch.Tensor:
    """A queued copy of a device tensor into pinned host memory (read once its step's event has passed)."""
    h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    h.copy_(t, non_blocking=True)
    return h
