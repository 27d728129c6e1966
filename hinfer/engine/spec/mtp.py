"""MTPDrafter: the checkpoint's multi-token-prediction head as the drafter.

The head at position q reads (token q+1, the target's final-normed hidden state at q) and predicts token q+2;
its attention layer keeps its own KV (ModelState rows `mtp_kv_index`) on the lane's pages, so it must see every
position of the sequence once with the target's hidden state: prompt chunks (token-shifted; the pair of the last
prompt position needs the first sampled token) and each round's accepted positions. The forward over those rows
also yields the first draft; K-1 single-token steps follow, each feeding the head its own output hidden state
in place of the target's (which does not exist yet). Their KV rows are provisional: the next round's accepted
positions are re-run with the target's hidden states and overwrite them, and attention never reads past a
lane's length. After a round whose acceptance is counted on the device (the decoder's early pass), the pass over
its positions and the next round's single-token steps are all queued before the host reads that count: each
lane's steps start at the row its count names, their rows moved there on the device (`_chain`).

CUDA graphs (use_graphs): the single-token steps replay a captured MTP step (one token per lane); the pass over
a round's accepted positions replays one of K + 1 rows per lane (fewer rows are padded, engine/cuda_graphs.py);
a pass over a long prompt chunk runs eagerly. Each has a twin for lanes that all draft the raw argmax (plain
greedy) with the head and the argmax captured after the layer: a draft step is then one replay, where the head
launched eagerly left the GPU waiting on the host's dispatch of its kernel each step.

Each draft step reads the whole lm_head (2.5 GB on the 27B in bf16, as much as a sixth of an int4 model's step):
a quantized model's drafter gets its own lm_head copy in the model's format (`draft_head`, made by
`make_spec_decoder`; the memory plan's "draft lm_head" row). With --spec-draft-vocab N it holds only the first N
rows (a view of the model's own when they are not quantized) and the other ids get -inf: never drafted, so the
output cannot change, only acceptance (the tokenizer numbers tokens roughly by merge frequency).

Drafts are drawn from the head's distribution after the request's own sampler processing (q), with the seeded
DRAFT noise, so rejection sampling can judge them; greedy requests draft the argmax (q one-hot).
"""

from __future__ import annotations

import math

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.engine.sampler import RowState, Sampler, to_device, vocab_gamma
from hinfer.engine.spec.dist import (
    DRAFT,
    Position,
    few_nonzero,
    plain_greedy,
    processed_logits,
    racer,
    real_argmax,
    sampling_probs,
)
from hinfer.engine.spec.drafter import DeviceDrafts, DraftJob, Proposal
from hinfer.errors import ConfigError
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import ModelState
from hinfer.ops.linear import linear

SCRATCH_SLOT = 0  # the head has no GDN layer; its batches still name a slot: the reserved scratch one


class MTPDrafter:
    reads_hidden = True  # the head runs over the target's hidden rows: its feeds are gathered (drafter.py)

    def __init__(self, model: Qwen35ForCausalLM, state: ModelState, sampler: Sampler, draft_head=None,
                 argmax_sampled: bool = False) -> None:  # fmt: skip
        if model.mtp is None:
            raise ConfigError("--spec mtp: this checkpoint has no MTP head (mtp_num_hidden_layers is 0)")
        if state.shape.mtp_layers < len(model.mtp.layers):
            raise ConfigError("--spec mtp: the state pool has no KV rows for the MTP head")
        self.model, self.state, self.sampler = model, state, sampler
        self.device = state.k_cache.device
        self._gamma = vocab_gamma(model.cfg.vocab_size, self.device)
        # (rows per lane: 1 or K + 1, with the argmax tail) -> MTP StepGraphs per page-table width
        self.graphs: dict[tuple[int, bool], list] = {}
        self.draft_head = draft_head  # the lm_head copy (or row view) drafts use, else None: the model's
        self.argmax_sampled = argmax_sampled  # sampled lanes draft the argmax too (--spec-draft argmax)
        # a pass queued by `prelaunch`: (lane ids, starts, hidden output, its rows' argmax drafts, rows per lane,
        # the next round's drafts chained behind it or None)
        self._early: tuple | None = None
        self.chained = 0  # rounds whose proposals came from a chain (`_chain`), for the counters

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft logits: through the drafter's own (quantized) lm_head copy when it has one. Rejection sampling
        judges drafts by the distribution they were drawn from, so a cheaper head changes acceptance, never the
        output."""
        z = self._head(h)
        if self.draft_head is None:
            return z
        z, vocab = z.float(), self.model.cfg.vocab_size
        if z.shape[1] < vocab:  # a draft vocabulary (--spec-draft-vocab): the other ids are never drafted
            z = torch.nn.functional.pad(z, (0, vocab - z.shape[1]), value=-math.inf)
        return z

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """The raw draft logits: the model's lm_head, or the drafter's copy (a draft vocabulary's rows only)."""
        return self.model.compute_logits(h) if self.draft_head is None else linear(h, self.draft_head)

    def drafts_argmax(self, p: Position) -> bool:
        """Whether the position drafts the raw argmax of the draft logits: plain greedy, or (--spec-draft argmax) a
        sampled lane whose processed logits keep the raw argmax on top (no bias, penalties or grammar;
        temperature and the filters keep the largest logit) and stay so for the whole round (no thinking budget,
        whose forced `</think>` could come mid-round: a lane's drafts are all argmax or all drawn from q). Such a
        draft is deterministic: its q is one-hot, so rejection sampling still yields the target's distribution."""
        if plain_greedy(p):
            return True
        x, r = p.row.params, p.row
        return (self.argmax_sampled and not x.logit_bias and not r.has_penalties and r.grammar is None
                and x.thinking_budget is None)  # fmt: skip

    def _argmax_drafts(self, h: torch.Tensor) -> torch.Tensor:
        """Drafts of plain greedy lanes: the argmax over the real tokens of the raw draft logits. Their processed
        logits differ from these only by the padding mask (and a draft vocabulary's -inf tail), and their q is
        one-hot at that argmax: the probabilities, noise and draw would give the same token."""
        return real_argmax(self._head(h), self.sampler.num_real_tokens)

    def prelaunch(self, seqs: list, starts: list[int], hidden: torch.Tensor, ids: torch.Tensor, t: int,
                  kept: torch.Tensor | None = None) -> bool:  # fmt: skip
        """Queue the pass over t positions per lane from `starts` (`hidden`, `ids`: their target hidden rows and
        next tokens, [lanes * t], on the device) through the t-row graph, before the caller knows how many of
        them will be kept; `draft` takes its rows when its jobs are these lanes at these starts. With `kept`
        ([lanes] on the device: how many drafts each lane's round accepted, the host's count to come) the round's
        next t - 1 drafts are queued too (`_chain`). -> whether the pass was queued (a graph took it)."""
        from hinfer.engine.cuda_graphs import pick

        chunks = [SeqChunk([0] * t, st, s.pages, SCRATCH_SLOT, **placed(s, st, t)) for s, st in zip(seqs, starts)]
        g = pick(self.graphs.get((t, True)), chunks)
        if g is None or g.t != t:
            return False
        read = DeviceDrafts(kept[None]) if kept is not None else None  # on its way to the host ahead of the pass
        out, drafts = g.run(chunks, hidden, ids)
        chain = self._chain(seqs, starts, out, drafts, t, kept, read) if read is not None else None
        self._early = ([id(s) for s in seqs], list(starts), out, drafts, t, chain)
        return True

    def _chain(self, seqs: list, starts: list[int], out: torch.Tensor, drafts: torch.Tensor, t: int,
               kept: torch.Tensor, read: DeviceDrafts) -> tuple[DeviceDrafts, DeviceDrafts] | None:  # fmt: skip
        """The next round's t - 1 argmax drafts of every lane, queued behind the pass before the host reads the
        acceptance: lane i's first draft is the pass's row kept[i] (its last accepted position), each later one a
        single-token step at that position + step, the rows moved there on the device (StepGraphs.run's shift).
        Its rows past the lane's length are provisional, as every draft step's. -> (`read`: kept on its way to
        the host; the drafts), or None where the single-token graphs cannot take every lane that far."""
        from hinfer.engine.cuda_graphs import pick

        k, m = t - 1, len(seqs)
        if k < 2 or any(s.images is not None for s in seqs):
            return None
        far = [SeqChunk([0], st + 2 * k - 1, s.pages, SCRATCH_SLOT) for s, st in zip(seqs, starts)]
        g = pick(self.graphs.get((1, True)), far)  # the farthest row the shifted steps may reach
        if g is None:
            return None
        at = torch.arange(m, device=kept.device) * t + kept
        h, d = out.index_select(0, at), drafts.index_select(0, at)
        cols = _DraftColumns([k] * m, self.device)
        lanes = list(range(m))
        cols.put(0, lanes, d)
        for step in range(1, k):
            chunks = [SeqChunk([0], st + step, s.pages, SCRATCH_SLOT) for s, st in zip(seqs, starts)]
            h, d = (o[:m] for o in g.run(chunks, h, d, shift=kept))
            cols.put(step, lanes, d)
        return read, DeviceDrafts(cols.dev)  # their copy to the host queued behind the steps

    def _early_rows(self, jobs: list[DraftJob]) -> tuple[torch.Tensor, torch.Tensor] | list[Proposal | None] | None:
        """The queued pass's output rows and their argmax drafts for these jobs (each job's last fed position,
        drafting jobs only), if it ran over exactly these lanes from these starts and covers their positions; or
        the jobs' proposals outright where its chain drafted for the positions they keep (each at most its count
        of the chain's drafts). Consumed either way."""
        early, self._early = self._early, None
        if early is None:
            return None
        ids, starts, out, drafts, t, chain = early
        if len(jobs) != len(ids) or any(id(j.seq) != i or j.start != st or len(j.next_ids) > t
                                        for j, i, st in zip(jobs, ids, starts)):  # fmt: skip
            return None
        if chain is not None:
            kept, d = chain
            if all(len(j.next_ids) - 1 == a for j, a in zip(jobs, kept.row(0, len(jobs)))):
                self.chained += 1
                return [Proposal([], None, (d, r, min(j.num_drafts, t - 1))) if j.num_drafts > 0 else None
                        for r, j in enumerate(jobs)]  # fmt: skip
        return _rows(out, drafts, [r * t + len(j.next_ids) - 1 for r, j in enumerate(jobs) if j.num_drafts > 0])

    def use_graphs(self, max_lanes: int, k: int, max_context: int, capture: bool) -> None:
        from hinfer.engine.cuda_graphs import StepGraphs, build

        for t in sorted({1, k + 1}):
            for argmax in (False, True):
                tail = self._argmax_drafts if argmax else None
                self.graphs[t, argmax] = build(
                    lambda w, t=t, tail=tail: StepGraphs(self.model, self.state, max_lanes, w, t, head="mtp", tail=tail),
                    max_context, self.state.page_size, capture)  # fmt: skip

    def forward(self, chunks: list[SeqChunk], hidden: torch.Tensor, ids: torch.Tensor | None = None,
                argmax: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """The head over `chunks` (token_ids = the next tokens; `ids`: one token per chunk as a device tensor,
        replacing them) -> (its hidden states at the rows wanting logits, their raw argmax drafts when `argmax`
        and a graph took the step, else None)."""
        if self.graphs:
            from hinfer.engine.cuda_graphs import pick

            widest = max(len(c.token_ids) for c in chunks)
            sets = next((g for (t, a), g in sorted(self.graphs.items()) if t >= widest and a == argmax), None)
            g = pick(sets, chunks)
            if g is not None:
                out, drafts = (*g.run(chunks, hidden, ids), None)[:2]
                if g.t == 1 and all(c.need_logits for c in chunks):  # the draft steps: no index tensor per step
                    return out[: len(chunks)], None if drafts is None else drafts[: len(chunks)]
                return _rows(out, drafts, [i * g.t + len(c.token_ids) - 1 for i, c in enumerate(chunks)
                                           if c.need_logits])  # fmt: skip
        batch = build_forward_batch(chunks, self.state.page_size, self.device)
        if ids is not None:
            batch.input_ids.copy_(ids)
        out = self.model.mtp_forward(batch.input_ids, hidden, batch, self.state)
        return out[batch.logits_indices], None

    @torch.inference_mode()
    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = [None] * len(jobs)
        early = self._early_rows(jobs)  # a pass queued this round is consumed here, used or not
        if isinstance(early, list):  # its chain drafted already
            return early
        if not jobs:
            return out
        chunks = [
            SeqChunk(j.next_ids, j.start, j.seq.pages, SCRATCH_SLOT, need_logits=j.num_drafts > 0,
                     **placed(j.seq, j.start, len(j.next_ids)))
            for j in jobs
        ]
        active = [i for i, j in enumerate(jobs) if j.num_drafts > 0]
        pos = [Position(jobs[i].seq.sampler_state, []) for i in active]
        # the lanes drafting the argmax, fixed for the round (a lane's drafts are all argmax or all drawn from q);
        # a step of such lanes only takes the raw argmax (`greedy`), in its graph where one takes it
        by_argmax = {i: self.drafts_argmax(p) for i, p in zip(active, pos)}
        greedy = all(by_argmax.values())
        # a pass that only feeds positions (no job drafts: a plain-decoding lane's backlog) skips the head: its
        # argmax graph would read the whole lm_head for nothing
        h, argmax = early if early is not None else self.forward(chunks, torch.cat([j.hidden for j in jobs]),
                                                                 argmax=greedy and bool(active))  # fmt: skip
        # lanes whose processed logits do not depend on their drafted prefix (no penalties, no thinking budget)
        # keep the drafts on the device: the verify step takes them from there, and the host reads them once
        # per round, after that step is queued (not once per draft, nor before the verify launch)
        on_device = all(prefix_free(jobs[i].seq.sampler_state) for i in active)
        toks: dict[int, list[int]] = {i: [] for i in active}
        probs: dict[int, list[torch.Tensor]] = {i: [] for i in active}
        # the device path's drafts, [first step's lanes, steps]: each step's tokens are copied in at once, since
        # a graph's outputs are its static buffers and the next replay of the same graph overwrites them
        drawn = _DraftColumns([jobs[i].num_drafts for i in active], self.device) if on_device and active else None
        step, last = 0, None
        while active:
            if step > 0:  # position of the draft just made: (last fed position) + step
                # (on the device path the token is `last`; 0 stands in for it in the chunk)
                at = [jobs[i].start + len(jobs[i].next_ids) - 1 + step for i in active]
                chunks = [SeqChunk([toks[i][-1] if toks[i] else 0], p, jobs[i].seq.pages, SCRATCH_SLOT,
                                   **placed(jobs[i].seq, p, 1)) for i, p in zip(active, at)]  # fmt: skip
                pos = [Position(jobs[i].seq.sampler_state, toks[i]) for i in active]
                greedy = all(by_argmax[i] and self.drafts_argmax(p) for i, p in zip(active, pos))
                h, argmax = self.forward(chunks, h, last, argmax=greedy)
            if greedy:
                t_dev = argmax if argmax is not None else self._argmax_drafts(h)
            else:
                q = sampling_probs(processed_logits(self.sampler, self.logits(h), pos), pos)
                # argmax lanes take their q's top (the raw argmax: a filter keeps the largest logit), without noise
                draws = [None if p.row.params.greedy or by_argmax[i] else (p.row.seed, p.row.num_generated + step)
                         for i, p in zip(active, pos)]  # fmt: skip
                t_dev = racer(draws, DRAFT, self._gamma, all(map(few_nonzero, pos)))(q)
            if drawn is not None:
                drawn.put(step, active, t_dev)
            else:
                for i, t in zip(active, t_dev.tolist()):
                    toks[i].append(t)
            for r, i in enumerate(active):
                if not (greedy or by_argmax[i] or jobs[i].seq.params.greedy):  # drawn from q: rejection needs it
                    probs[i].append(q[r])
            step += 1
            keep = [r for r, i in enumerate(active) if jobs[i].num_drafts > step]
            if len(keep) < len(active):
                active, h, t_dev = [active[r] for r in keep], h[keep], t_dev[keep]
            last = t_dev if on_device else None
        pending = drawn.pending() if drawn is not None else {}
        for i in toks:
            p = torch.stack(probs[i]) if probs[i] else None
            out[i] = Proposal([], p, pending[i]) if i in pending else Proposal(toks[i], p)
        return out


def placed(seq, start: int, n: int) -> dict:
    """The rotary positions of a lane's rows [start, start + n) where its prompt holds images (the target's own:
    images shift the text after them); the head reads the next token's embedding there, image placeholder or not."""
    return {} if seq.images is None else seq.images.position_fields(start, start + n)


def _rows(out: torch.Tensor, drafts: torch.Tensor | None, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """out[idx] and drafts[idx] (drafts may be None) with one index upload."""
    if idx == list(range(out.shape[0])):
        return out, drafts
    at = to_device(idx, torch.int64, out.device)
    return out.index_select(0, at), None if drafts is None else drafts.index_select(0, at)


class _DraftColumns:
    """A round's drafts left on the device: [lanes of the first step, steps] int64, row r lane r's tokens (zeros
    past its count, never read). Lanes only drop out of later steps. The host reads them once, after
    verification is queued."""

    def __init__(self, counts: list[int], device: torch.device) -> None:
        self.counts = counts
        self.first: list[int] | None = None
        self.dev = torch.zeros((len(counts), max(counts)), dtype=torch.int64, device=device)

    def put(self, step: int, lanes: list[int], tokens: torch.Tensor) -> None:
        """Step `step`'s tokens of `lanes` (job indices), copied now: `tokens` may be a graph's output buffer."""
        if self.first is None:
            self.first = list(lanes)
        if len(lanes) == len(self.first):
            self.dev[:, step].copy_(tokens)
        else:
            at = to_device([self.first.index(i) for i in lanes], torch.int64, tokens.device)
            self.dev[:, step].index_copy_(0, at, tokens)

    def pending(self) -> dict[int, tuple[DeviceDrafts, int, int]]:
        """job index -> (the drafts, its row, its count), the copy to the host queued behind them."""
        d = DeviceDrafts(self.dev)
        return {i: (d, r, n) for r, (i, n) in enumerate(zip(self.first or [], self.counts))}


def prefix_free(row: RowState) -> bool:
    """Whether a lane's processed logits ignore the tokens it drafted before (they count only through penalties,
    a thinking budget's step count, dist.position_row, and a grammar's mask, dist.grammar_masks)."""
    return not row.has_penalties and row.params.thinking_budget is None and row.grammar is None
