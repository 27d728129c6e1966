"""SpecDecoder: one engine step with speculative decoding, in place of ModelRunner.step.

A step is one target forward over every scheduled chunk: each decoding lane verifies [t0, d1..dk] (its pending
token and the drafts of its last round; the GDN state after token j goes to the lane's draft slot j), prompt
chunks ride along as usual. Then acceptance per lane (verify.py) with the target distribution after the
request's sampler processing (dist.py), and rollback by bookkeeping alone: a accepted drafts make draft slot a
the lane's current GDN slot (its old slot takes that place in the draft list) and the lane's length p + a + 1
hides the rejected KV rows, which later steps overwrite. After the engine has applied stop rules,
`after_step` gives the drafter the positions just run for each lane that goes on (drafter.py).

Drafts per round are capped so a round never produces more tokens than max_tokens or max_context allow (the
pages reserved at admission cover them). A step of decoding lanes only replays a captured verify graph (K + 1
tokens per lane, engine/cuda_graphs.py); a step with prompt chunks runs eagerly. The MTP drafter has its own
graphs (mtp.py).

With an adaptive policy (adaptive.py) `after_step` also picks the next step's K and each lane's draft count.
At K = 0 the next step is a plain decode step: one token per lane, the runner's decode graphs, the plain
sampler; the MTP head is still fed the positions, and probe drafts are only compared with the chosen token.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.engine.cuda_graphs import pick
from hinfer.engine.prompt_logprobs import record_prompt_logprobs, wants_prompt_logprobs
from hinfer.engine.protocol import TopLogprob
from hinfer.engine.runner import ModelRunner
from hinfer.engine.sampler import take_rows, to_device, vocab_gamma
from hinfer.engine.sequence import ScheduledChunk, Sequence, Status
from hinfer.engine.spec.adaptive import AdaptivePolicy, LaneAcceptance
from hinfer.engine.spec.dist import (
    ACCEPT,
    RESAMPLE,
    Position,
    cut_at_grammar_end,
    few_nonzero,
    forces_think_end,
    plain_greedy,
    processed_logits,
    racer,
    real_argmax,
    sampling_probs,
    spec_keys,
    uniforms,
)
from hinfer.engine.spec.drafter import DeviceDrafts, Drafter, DraftJob, Proposal
from hinfer.engine.spec.picks import draws_among_candidates, sampled_picks
from hinfer.engine.spec.verify import accept

log = logging.getLogger("hinfer.spec")


@dataclass
class LaneOutput:
    """The tokens one lane produced this step (1 + accepted drafts), with logprobs when the request asked."""

    seq: Sequence
    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[TopLogprob] | None]


def verifies(chunk: SeqChunk) -> bool:
    """A decoding lane's round (its pending token and drafts, the GDN state after each), not a prompt chunk
    (which may want every row's logits too: prompt logprobs)."""
    return chunk.gdn_step_slots is not None


@dataclass
class _Fed:
    """Positions a chunk ran this step, kept for the drafter: start, next tokens, target hidden rows."""

    seq: Sequence
    start: int
    next_ids: list[int]
    hidden: torch.Tensor
    sampled: bool  # the chunk produced a token: the lane verifies next and wants drafts


def chain_on() -> bool:
    """HINFER_SPEC_CHAIN (read every round; default 1): `0` leaves the next round's drafts to after the acceptance
    read (MTPDrafter._chain off), to compare the two in one process."""
    return os.environ.get("HINFER_SPEC_CHAIN", "1") != "0"


def _argmax_lane(seq: Sequence) -> bool:
    """A lane whose every position takes the raw argmax whatever it drafted and wants no logprobs: plain greedy
    (dist.plain_greedy) with no thinking budget, the one thing a drafted prefix could change."""
    r = seq.sampler_state
    return r.params.thinking_budget is None and r.params.logprobs is None and plain_greedy(Position(r))


@dataclass
class _Taken:
    """A verifying lane's proposal as its step takes it: chunk index, the proposal, the k drafts it verifies
    (their tokens maybe still on the device) and their draft distribution (None: deterministic)."""

    index: int
    prop: Proposal | None
    k: int
    probs: torch.Tensor | None

    def pending(self) -> bool:
        return self.prop is not None and self.prop.pending is not None and self.k > 0

    def known(self) -> list[int]:
        """The drafts as the host stages them: placeholders while pending (the graph takes the real ones)."""
        return [0] * self.k if self.pending() else self.tokens()

    def tokens(self) -> list[int]:
        return self.prop.settle()[: self.k] if self.prop is not None and self.k else []


@dataclass
class _Lane:
    """A verifying lane: its logits rows start at `row`, k drafts with their draft distribution."""

    seq: Sequence
    row: int
    drafts: list[int]
    probs: torch.Tensor | None


@dataclass
class Launched:
    """A step whose GPU work is queued and not read yet (SpecDecoder.launch -> land)."""

    chunks: list[ScheduledChunk]
    seq_chunks: list[SeqChunk]
    verifying: list[_Taken]
    shadows: dict[int, Proposal]  # chunk index -> the probe draft a plain step only compares
    hidden: torch.Tensor
    logits: torch.Tensor
    rows: list[tuple[int, int]]
    picks: DeviceDrafts | None  # every row's next token on its way to the host (the early draft pass's)
    plain: bool  # a plain decode step (K = 0)


class SpecDecoder:
    def __init__(self, runner: ModelRunner, draft_tokens: int, drafter: Drafter, max_context: int,
                 policy: AdaptivePolicy | None = None) -> None:
        self.runner = runner
        self.model, self.state, self.sampler = runner.model, runner.state, runner.sampler
        self.device = runner.device
        self.k = draft_tokens
        self.policy = policy  # None: every round drafts min(K, budget)
        self.batch_k = draft_tokens  # the next step's K (0: a plain decode step), set by after_step
        self.accept_hist = [0] * (draft_tokens + 1)  # lane-rounds with drafts, by drafts accepted
        self.plain_steps = self.verify_steps = self.finished = 0
        self.rounds_first = 0  # steps launched before the last one's bookkeeping (EngineCore._round_first)
        self.choices = 0  # steps whose K the policy chose: every probe_every-th is a probe tick
        self._timing: tuple[float, int, int] | None = None  # (start, K, lanes) of a decode-only step
        self._landed_at: tuple[float, int] | None = None  # (time, lanes) of the last plain step run ahead, read
        self.drafter = drafter
        self.max_context = max_context
        self._gamma = vocab_gamma(self.model.cfg.vocab_size, self.device)
        self._fed: list[_Fed] = []
        self.rounds = self.drafted = self.accepted = 0
        self.graphs: list | None = None  # verify StepGraphs per page-table width, once built

    def use_graphs(self, max_lanes: int, capture: bool) -> None:
        """Verify graphs (K + 1 tokens per lane, GDN state per position) and the drafter's, for every width."""
        from hinfer.engine.cuda_graphs import StepGraphs, build

        try:
            self.graphs = build(lambda w: StepGraphs(self.model, self.state, max_lanes, w, self.k + 1, verify=True),
                                self.max_context, self.state.page_size, capture)  # fmt: skip
            if hasattr(self.drafter, "use_graphs"):
                self.drafter.use_graphs(max_lanes, self.k, self.max_context, capture)
        except RuntimeError as e:  # speculation still works eagerly; a failed capture must not stop the server
            log.warning("speculative CUDA graphs not captured (%s); verify and draft steps run eagerly", e)
            self.graphs = None
            if hasattr(self.drafter, "graphs"):
                self.drafter.graphs = {}

    def counters(self) -> dict[str, float]:
        out = {"spec_rounds": self.rounds, "spec_drafted": self.drafted, "spec_accepted": self.accepted,
               "spec_plain_steps": self.plain_steps, "spec_verify_steps": self.verify_steps,
               "spec_batch_k": self.batch_k, "spec_chained": getattr(self.drafter, "chained", 0),
               "spec_rounds_first": self.rounds_first}  # fmt: skip
        out |= {f"spec_accept_len_{a}": n for a, n in enumerate(self.accept_hist)}
        if self.policy is not None:
            out |= self.policy.costs.table()
        return out

    def note_finished(self, seq: Sequence, every: int = 100) -> None:
        """A debug line per request, and the engine's acceptance so far every `every` requests."""
        log.debug("%s: %d drafted, %d accepted", seq.request_id, seq.spec_drafted, seq.spec_accepted)
        self.finished += 1
        if self.finished % every == 0:
            log.info("speculation over %d requests: %d drafted, %d accepted (%.1f%%), %.2f tokens per lane-round, "
                     "%d verify / %d plain steps, accepted lengths %s", self.finished, self.drafted, self.accepted,
                     100 * self.accepted / max(1, self.drafted), (self.accepted + self.rounds) / max(1, self.rounds),
                     self.verify_steps, self.plain_steps, self.accept_hist)  # fmt: skip

    def _left(self, seq: Sequence) -> int:
        """Tokens the lane may still produce under max_tokens and max_context."""
        return min(seq.params.max_tokens - len(seq.output_ids), self.max_context - seq.num_tokens)

    def budget(self, seq: Sequence) -> int:
        """Drafts the lane's next round may carry: the round's k + 1 tokens must fit max_tokens and max_context."""
        return max(0, min(self.k, self._left(seq) - 1))

    def _will_draft(self, seq: Sequence) -> bool:
        """A lane still in its prompt speculates later iff the round after its first token may carry a draft."""
        left = min(seq.params.max_tokens, self.max_context - len(seq.prompt_ids)) - 1  # after the first token
        return min(self.k, left - 1) > 0

    # ---- the step ------------------------------------------------------------------------------
    def runs_plain(self, chunks: list[ScheduledChunk]) -> bool:
        """Whether the next step is a plain decode step of decoding lanes (adaptive speculation at K = 0), which
        the engine may then run ahead of reading the previous one's tokens, as without speculation; `landed`
        takes its tokens."""
        return self.batch_k == 0 and all(not c.seq.in_prefill for c in chunks)

    @torch.inference_mode()
    def landed(self, seqs: list[Sequence], starts: list[int], tokens: list[int], hidden: torch.Tensor) -> None:
        """A plain decode step the engine ran ahead, its tokens read (and taken under the stop rules): what `step`
        and `after_step` do after a plain step of their own. A lane's probe draft made after the step before
        (its proposal) is compared with the token, the positions go to the drafter, the next K is chosen. The time
        between two such landings with as many lanes is a plain step's cost sample (the GPU's period while it runs
        ahead of the host)."""
        self.plain_steps += 1
        now, last = time.monotonic(), self._landed_at
        if self.policy is not None and last is not None and last[1] == len(seqs):  # chained: a plain step's period
            self.policy.costs.record(len(seqs), 0, now - last[0])
        self._landed_at = (now, len(seqs))
        for i, s in enumerate(seqs):
            prop, s.drafts = s.drafts, None
            if (self.policy is not None and isinstance(prop, Proposal) and prop.count
                    and isinstance(s.spec_lane, LaneAcceptance)):  # fmt: skip
                self.policy.observe(s.spec_lane, 1, int(tokens[i] == prop.settle()[0]))
            self._fed.append(_Fed(s, starts[i], [tokens[i]], hidden[i : i + 1], True))
        self.after_step()

    def step(self, chunks: list[ScheduledChunk]) -> list[LaneOutput]:
        """Run one step; -> the tokens of every chunk that produces some, in order."""
        return self.land(self.launch(chunks))

    @torch.inference_mode()
    def launch(self, chunks: list[ScheduledChunk], first: bool = False) -> Launched:
        """The step's GPU work queued (the target forward; for a round of verifying lanes the drafter's pass and
        chain behind it), nothing read yet: `land` reads and applies it. The engine may do a round's host
        bookkeeping between the two (EngineCore: the next round launched before the last one's stop rules and
        text; `first` counts those launches)."""
        self.rounds_first += first
        self._fed = []
        self._landed_at = None  # a step read at once ends a chain of steps run ahead
        plain = self.batch_k == 0  # a plain decode step: no lane verifies drafts
        decode_only = not any(c.seq.in_prefill for c in chunks)
        self._timing = (time.monotonic(), self.batch_k, len(chunks)) if decode_only else None
        self.plain_steps += plain and decode_only
        self.verify_steps += not plain and decode_only
        seq_chunks: list[SeqChunk] = []
        verifying: list[_Taken] = []
        shadows: dict[int, Proposal] = {}  # chunk index -> the probe draft a plain step only compares
        for i, c in enumerate(chunks):
            s = c.seq
            if s.in_prefill:
                toks = s.pending_tokens()[: c.num_tokens]
                seq_chunks.append(SeqChunk(toks, s.num_cached, s.pages, s.slot, need_logits=c.samples,
                                           all_logits=wants_prompt_logprobs(s), gdn_save=c.gdn_save,
                                           **self.runner.image_fields(s, len(toks))))  # fmt: skip
                continue
            if plain:  # the GDN state advances in the lane's own slot, as in plain decoding
                prop, s.drafts = s.drafts, None
                if isinstance(prop, Proposal) and prop.count:
                    shadows[i] = prop
                seq_chunks.append(SeqChunk(s.pending_tokens(), s.num_cached, s.pages, s.slot, need_logits=True,
                                           **self.runner.image_fields(s, 1)))  # fmt: skip
                continue
            taken = self._take_drafts(i, s)
            toks = s.pending_tokens() + taken.known()
            assert len(toks) == taken.k + 1, "a decoding lane has exactly one pending token"
            seq_chunks.append(SeqChunk(toks, s.num_cached, s.pages, s.slot, gdn_step_slots=s.draft_slots[: len(toks)],
                                       all_logits=True, **self.runner.image_fields(s, len(toks))))  # fmt: skip
            verifying.append(taken)
        fed = self._drafts_on_device(verifying, seq_chunks)
        hidden, logits, rows = self._target_forward(seq_chunks, plain and decode_only, fed)
        picks = None if plain else self._early_draft_pass(chunks, seq_chunks, verifying, fed, hidden, logits, rows)
        return Launched(chunks, seq_chunks, verifying, shadows, hidden, logits, rows, picks, plain)

    @torch.inference_mode()
    def land(self, step: Launched) -> list[LaneOutput]:
        """Read a launched step and apply it: acceptance, the lanes' lengths and GDN slots, the drafter's feed;
        -> the tokens of every chunk that produces some, in order. A lane that finished since the launch (an
        abort) is passed over: its rows are dropped, its resources are already back with the scheduler (the GPU
        reaches any later use of them after this step's kernels)."""
        chunks, seq_chunks, rows, logits, hidden = step.chunks, step.seq_chunks, step.rows, step.logits, step.hidden
        live = [c.seq.status is Status.RUNNING for c in chunks]
        for c, sc, (_, r), ok in zip(chunks, seq_chunks, rows, live):
            if ok and sc.all_logits and not verifies(sc):  # a prompt chunk whose request wants its prompt logprobs
                record_prompt_logprobs(c.seq, sc.cached_len, logits[r : r + len(sc.token_ids)])
        firsts = [(c.seq, rows[i][1] + (len(sc.token_ids) - 1 if sc.all_logits else 0))
                  for i, (c, sc) in enumerate(zip(chunks, seq_chunks))
                  if live[i] and c.samples and (c.seq.in_prefill or step.plain)]  # fmt: skip
        lanes = [_Lane(chunks[v.index].seq, rows[v.index][1], v.tokens(), v.probs) for v in step.verifying
                 if live[v.index]]  # fmt: skip
        out = {id(o.seq): o for o in self._sample_firsts(firsts, logits) + self._verify(lanes, logits, step.picks)}
        for i, prop in step.shadows.items():  # a probe in a plain step: would the target have accepted it?
            s = chunks[i].seq
            if live[i] and self.policy is not None and isinstance(s.spec_lane, LaneAcceptance):
                self.policy.observe(s.spec_lane, 1, int(out[id(s)].token_ids[0] == prop.settle()[0]))

        results: list[LaneOutput] = []
        for c, sc, (h0, _), ok in zip(chunks, seq_chunks, rows, live):
            if not ok:
                continue
            s, n, o = c.seq, len(sc.token_ids), out.get(id(c.seq))
            if verifies(sc):  # a verified round: the state after the last accepted token becomes current
                a = len(o.token_ids) - 1
                s.slot, s.draft_slots[a] = s.draft_slots[a], s.slot
                s.num_cached += a + 1  # the rejected positions' KV rows lie past the length: never read
                self._fed.append(_Fed(s, sc.cached_len, o.token_ids, hidden[h0 : h0 + a + 1], True))
            else:
                s.num_cached += n
                tail = s.prompt_ids[sc.cached_len + 1 : sc.cached_len + n + 1] + (o.token_ids if o else [])
                self._fed.append(_Fed(s, sc.cached_len, tail, hidden[h0 : h0 + n], o is not None))
            if o is not None:
                results.append(o)
        return results

    def _take_drafts(self, index: int, seq: Sequence) -> _Taken:
        """The lane's proposal, cut to its budget."""
        prop, seq.drafts = seq.drafts, None
        if not isinstance(prop, Proposal):
            return _Taken(index, None, 0, None)
        k = min(prop.count, self.budget(seq))
        return _Taken(index, prop, k, prop.probs[:k] if k and prop.probs is not None else None)

    def _drafts_on_device(self, verifying: list[_Taken], seq_chunks: list[SeqChunk]) -> torch.Tensor | None:
        """Drafts the host has not read yet go into the verify graph from the device ([lanes, width], lane i's
        after its pending token) when every chunk is a verifying lane whose drafts are row i of one round's
        drafts and a verify graph takes the step. Otherwise they are read here into their chunks (an eager step
        builds its batch on the host)."""
        pend = [v for v in verifying if v.pending()]
        if not pend:
            return None
        d = pend[0].prop.pending[0]
        if (len(verifying) == len(seq_chunks) and all(v.pending() and v.prop.pending[:2] == (d, v.index)
                                                      for v in verifying)
                and self.graphs and pick(self.graphs, seq_chunks) is not None):  # fmt: skip
            return d.dev[: len(seq_chunks)]  # the round may have drafted for lanes since gone (rows past these)
        for v in pend:
            c = seq_chunks[v.index]
            c.token_ids = c.token_ids[:1] + v.tokens()
        return None

    def _target_forward(
        self, seq_chunks: list[SeqChunk], plain: bool = False, drafts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
        """-> (final-normed hidden, logits, per chunk its first (hidden row, logits row)). A verify graph when
        every chunk is a verifying lane that fits one (`drafts`: their tokens still on the device), the runner's
        decode graph for a plain step of decoding lanes; else eager (rows packed)."""
        graphs = self.runner.graphs if plain else self.graphs if all(map(verifies, seq_chunks)) else None
        if graphs:
            g = pick(graphs, seq_chunks)
            if g is not None:
                hidden, logits = g.run(seq_chunks, drafts=drafts)
                return hidden, logits, [(i * g.t, i * g.t) for i in range(len(seq_chunks))]
        assert drafts is None, "drafts on the device need the verify graph"
        batch = build_forward_batch(seq_chunks, self.state.page_size, self.device)
        hidden = self.model(batch, self.state)
        rows, h, r = [], 0, 0
        for c in seq_chunks:
            rows.append((h, r))
            h += len(c.token_ids)
            r += len(c.token_ids) if c.all_logits else int(c.need_logits)
        return hidden, self.model.compute_logits(hidden[batch.logits_indices]), rows

    def _sample_firsts(self, firsts: list[tuple[Sequence, int]], logits: torch.Tensor) -> list[LaneOutput]:
        """A prompt's first token: the plain sampler, exactly as without speculation."""
        if not firsts:
            return []
        rows = [s.sampler_state for s, _ in firsts]
        ids, lps, tops = self.sampler.sample(take_rows(logits, [r for _, r in firsts]), rows).to_host(rows)
        self.sampler.update(rows, ids)
        return [LaneOutput(s, [t], [lp], [top]) for (s, _), t, lp, top in zip(firsts, ids, lps, tops)]

    def _early_draft_pass(self, chunks: list[ScheduledChunk], seq_chunks: list[SeqChunk], verifying: list[_Taken],
                          fed: torch.Tensor | None, hidden: torch.Tensor, logits: torch.Tensor,
                          rows: list[tuple[int, int]]) -> DeviceDrafts | None:  # fmt: skip
        """A step of verifying lanes, each with K + 1 rows at i * (K + 1) and room for K + 1 positions, that all take
        the raw argmax or draw among their candidates with deterministic drafts (picks.py): the token after each
        verified position is known on the device (the target's argmax there; for a sampled lane the draft where
        it is accepted, else the residual's draw), so the drafter's pass over them is queued now, before the host
        reads the acceptance; its rows past the acceptance are provisional, like the draft steps' KV rows, and
        overwritten before anything reads them. -> every row's next token ([lanes * (K + 1)]: a row accepts its
        draft where that is the draft, for a judged sampled row too, whose residual excludes the draft), its copy to
        the host queued ahead of the pass so that reading it does not wait for the pass; None when the step does
        not qualify (the drafter then runs its pass after acceptance). Where every lane drafted K and will draft K
        next round whatever it accepts, the drafter also gets each lane's accepted count on the device and queues
        the next round's K drafts behind the pass (MTPDrafter._chain): the GPU drafts while the host reads and
        applies the acceptance."""
        prelaunch = getattr(self.drafter, "prelaunch", None)
        t, m = self.k + 1, len(chunks)
        if (prelaunch is None or not all(map(verifies, seq_chunks)) or logits.shape[0] < m * t
                or rows != [(i * t, i * t) for i in range(m)]
                or not all(self.budget(c.seq) == self.k and (_argmax_lane(c.seq) or (
                    v.probs is None and draws_among_candidates(Position(c.seq.sampler_state))))
                           for c, v in zip(chunks, verifying))):  # fmt: skip
            return None
        picks = real_argmax(logits[: m * t], self.sampler.num_real_tokens)
        sampled = [i for i, c in enumerate(chunks) if not c.seq.params.greedy]
        chain = chain_on() and all(v.k == self.k and self._chains(c.seq) for c, v in zip(chunks, verifying))
        drafts = self._round_drafts(verifying, fed, t) if sampled or chain else None
        if sampled:  # their rows' picks replace the argmax
            at = to_device([i * t + j for i in sampled for j in range(t)], torch.int64, logits.device)
            lanes = [Position(chunks[i].seq.sampler_state) for i in sampled]
            drawn, _ = sampled_picks(self.sampler, logits.index_select(0, at), lanes,
                                     drafts.view(-1).index_select(0, at), t, self._gamma)  # fmt: skip
            picks.index_copy_(0, at, drawn)
        read = DeviceDrafts(picks[None])
        # each lane's accepted count as the host will count it (_accept_greedy): the drafts' leading agreeing run
        kept = (picks.view(m, t) == drafts)[:, : self.k].long().cumprod(1).sum(1) if chain else None
        seqs = [c.seq for c in chunks]
        if not prelaunch(seqs, [sc.cached_len for sc in seq_chunks], hidden[: m * t], picks, t, kept):
            return None
        return read

    def _chains(self, seq: Sequence) -> bool:
        """Whether the lane's next round drafts a full K whatever this one accepts (its budget after a round of
        K + 1 tokens), so that the drafter may draft it before the host reads the acceptance."""
        return self._left(seq) >= 2 * self.k + 2

    def _round_drafts(self, verifying: list[_Taken], fed: torch.Tensor | None, t: int) -> torch.Tensor:
        """[lanes, t] int64 on the device: each lane's drafts (taken from the device where the verify step took
        them from there), -1 from its bonus row on."""
        if fed is None:
            return to_device([v.tokens() + [-1] * (t - v.k) for v in verifying], torch.int64, self.device)
        n, w = len(verifying), min(fed.shape[1], t - 1)
        d = torch.full((n, t), -1, dtype=torch.int64, device=fed.device)
        d[:, :w] = fed[:n, :w]
        ks = to_device([v.k for v in verifying], torch.int64, fed.device)[:, None]
        return torch.where(torch.arange(t, device=fed.device)[None, :] < ks, d, -1)

    def _verify(self, lanes: list[_Lane], logits: torch.Tensor, picks: DeviceDrafts | None = None) -> list[LaneOutput]:
        """Acceptance for every verifying lane at once; records the tokens in the sampler and the counters.
        `picks`: every logits row's raw argmax on its way to the host (the early draft pass's)."""
        if not lanes:
            return []
        dev = logits.device
        spans = [range(len(ln.drafts) + 1) for ln in lanes]
        positions = [
            Position(ln.seq.sampler_state, ln.drafts[:j]) for ln, js in zip(lanes, spans) for j in js
        ]
        at = [ln.row + j for ln, js in zip(lanes, spans) for j in js]
        if picks is not None:  # the early pass's: each row's next token, read once
            every = picks.row(0, logits.shape[0])
            z, (acc, last) = None, self._accept_greedy(lanes, [every[r] for r in at], positions)
        elif all(plain_greedy(p) and p.row.params.logprobs is None for p in positions):  # the raw argmax decides
            tok = real_argmax(take_rows(logits, at), self.sampler.num_real_tokens).tolist()
            z, (acc, last) = None, self._accept_greedy(lanes, tok, positions)
        elif all(ln.seq.params.greedy for ln in lanes):
            z = processed_logits(self.sampler, take_rows(logits, at), positions)
            acc, last = self._accept_greedy(lanes, torch.argmax(z, dim=-1).tolist(), positions)
        else:
            z = processed_logits(self.sampler, take_rows(logits, at), positions)
            p, q, drafts = self._padded(lanes, sampling_probs(z, positions))
            width = drafts.shape[1]
            first = [
                (ln.seq.seed, ln.seq.sampler_state.num_generated) for ln in lanes
            ]  # position 0's token index
            u = uniforms(spec_keys([(s, n + j) for s, n in first for j in range(width)], ACCEPT, dev))
            draws = [None if ln.seq.params.greedy else f for ln, f in zip(lanes, first)]
            num = to_device([len(ln.drafts) for ln in lanes], torch.int64, dev)
            # a residual's support lies among its row's candidates where every position has few nonzero probabilities
            race = racer(draws, RESAMPLE, self._gamma, all(map(few_nonzero, positions)))
            a_t, last_t = accept(p, q, drafts, num, u.view(len(lanes), width), race)
            acc, last = a_t.tolist(), last_t.tolist()  # the step's one host sync

        outs, off = [], 0
        for ln, a, t in zip(lanes, acc, last):
            toks = cut_at_grammar_end(ln.seq.sampler_state, ln.drafts[:a] + [t], self.sampler.vocab_size)
            zl = z[off : off + a + 1] if z is not None else None
            outs.append(LaneOutput(ln.seq, toks, *self._logprobs(ln.seq, zl, toks)))
            ln.seq.spec_drafted += len(ln.drafts)
            ln.seq.spec_accepted += a
            if ln.drafts:
                self.accept_hist[a] += 1
                if self.policy is not None and isinstance(ln.seq.spec_lane, LaneAcceptance):
                    self.policy.observe(ln.seq.spec_lane, len(ln.drafts), a)
            self.drafted += len(ln.drafts)
            self.accepted += a
            self.rounds += 1
            off += len(ln.drafts) + 1
        self.sampler.update([ln.seq.sampler_state for ln in lanes], [o.token_ids for o in outs])
        return outs

    @staticmethod
    def _accept_greedy(lanes: list[_Lane], tok: list[int], positions: list[Position]) -> tuple[list, list]:
        """Every lane greedy: rejection sampling with one-hot p and q is argmax agreement, so neither the
        distributions nor the noise are built; `tok` holds each position's argmax (the step's one host read).
        A forced `</think>` row is its one-hot, as in sampling_probs. Sampled lanes judged on the device
        (picks.py) come with each row's pick in `tok`: the draft exactly where it was accepted."""
        for i, p in enumerate(positions):
            if forces_think_end(p):
                tok[i] = int(p.row.params.think_end_token_id)
        acc, last, off = [], [], 0
        for ln in lanes:
            a = 0
            while a < len(ln.drafts) and ln.drafts[a] == tok[off + a]:
                a += 1
            acc.append(a)
            last.append(tok[off + a])
            off += len(ln.drafts) + 1
        return acc, last

    @staticmethod
    def _padded(lanes: list[_Lane], p_flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-lane rows padded to the widest lane: p [L, K+1, V], q [L, K, V] (one-hot for deterministic
        drafts), drafts [L, K]."""
        n, width, v = len(lanes), max(len(ln.drafts) for ln in lanes), p_flat.shape[1]
        dev, dt = p_flat.device, p_flat.dtype
        p = torch.zeros((n, width + 1, v), dtype=dt, device=dev)
        q = torch.zeros((n, width, v), dtype=dt, device=dev)
        drafts = torch.zeros((n, width), dtype=torch.int64, device=dev)
        off = 0
        for i, ln in enumerate(lanes):
            k = len(ln.drafts)
            p[i, : k + 1] = p_flat[off : off + k + 1]
            if k:
                d = to_device(ln.drafts, torch.int64, dev)
                drafts[i, :k] = d
                q[i, :k] = ln.probs if ln.probs is not None else torch.nn.functional.one_hot(d, v).to(dt)
            off += k + 1
        return p, q, drafts

    @staticmethod
    def _logprobs(seq: Sequence, z: torch.Tensor | None, toks: list[int]) -> tuple[list, list]:
        """Per token: its logprob under the processed logits, and the top-N (the sampler's convention)."""
        n = seq.params.logprobs
        if n is None or z is None:
            return [None] * len(toks), [None] * len(toks)
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        lp = (z.gather(1, torch.tensor(toks, device=z.device)[:, None]) - lse)[:, 0].tolist()
        top_v, top_i = torch.topk(z, n, dim=-1)
        tv, ti = (top_v - lse).tolist(), top_i.tolist()
        return lp, [[TopLogprob(i, x) for i, x in zip(ti[r], tv[r])] for r in range(len(toks))]

    # ---- drafting --------------------------------------------------------------------------------
    @torch.inference_mode()
    def after_step(self) -> None:
        """Feed the drafter this step's positions of every lane still running; store next round's drafts."""
        jobs = []
        for f in self._fed:
            s = f.seq
            if s.status is not Status.RUNNING:
                continue
            k = self.budget(s) if f.sampled else 0
            if (f.sampled and k == 0) or (not f.sampled and not self._will_draft(s)):
                continue  # this lane never drafts again: its drafter state is moot
            jobs.append(DraftJob(s, f.start, f.next_ids, f.hidden, k))
        self._fed = []
        if self.policy is not None:
            self._choose_k([j for j in jobs if j.num_drafts])
            if getattr(self.drafter, "reads_hidden", True):  # batching the feeds pays for a drafter that runs a model
                jobs = self._defer_observations(jobs)
        for job, prop in zip(jobs, self.drafter.draft(jobs)):
            if job.num_drafts:
                job.seq.drafts = prop
        if self._timing is not None:  # a decode-only step that ran at the K the next one uses: a clean sample
            t0, k, n = self._timing
            if self.policy is not None and k == self.batch_k:
                self.policy.costs.record(n, k, time.monotonic() - t0)
            self._timing = None

    def _defer_observations(self, jobs: list[DraftJob]) -> list[DraftJob]:
        """A decoding lane that drafts nothing this round keeps its positions (the target's hidden rows, copied)
        until it drafts again or K + 1 rows have gathered: the head then runs once over them (one of its K + 1
        row graphs) instead of once per plain step. A draft always follows every earlier position's feed."""
        out, cap = [], self.k + 1
        for j in jobs:
            back = j.seq.mtp_backlog
            rows = sum(len(b.next_ids) for b in back) + len(j.next_ids)
            if j.num_drafts == 0 and j.seq.output_ids and rows < cap:
                back.append(DraftJob(j.seq, j.start, j.next_ids, j.hidden.clone(), 0))
                continue
            if back:
                assert back[-1].start + len(back[-1].next_ids) == j.start, "backlog positions run on"
                j = DraftJob(j.seq, back[0].start, [t for b in back for t in b.next_ids] + j.next_ids,
                             torch.cat([b.hidden for b in back] + [j.hidden]), j.num_drafts)  # fmt: skip
                j.seq.mtp_backlog = []
            out.append(j)
        return out

    def _choose_k(self, jobs: list[DraftJob]) -> None:
        """The next step's K and each drafting lane's count (its budget on entry): min(lane K, step K), or one
        probe draft for a lane that would not draft and is due."""
        assert self.policy is not None
        pol = self.policy
        for j in jobs:
            if not isinstance(j.seq.spec_lane, LaneAcceptance):
                j.seq.spec_lane = pol.new_lane()
        wants = [(j.seq.spec_lane, pol.lane_k(j.seq.spec_lane, len(jobs), j.num_drafts)) for j in jobs]
        self.batch_k = pol.choose(wants)
        self.choices += 1
        tick = self.choices % pol.probe_every == 0
        for j, (st, kl) in zip(jobs, wants):
            n = min(kl, self.batch_k)
            j.num_drafts = n if not pol.probe_due(st, n > 0, tick) else 1
