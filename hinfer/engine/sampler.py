"""The batched sampler: one call per engine step over the logits of every running request.

Semantics, per row, in this order (each a no-op at its neutral value, so a row's result never depends on
which other rows share the batch):

1. `logit_bias` is added to the model's logits z.
2. `repetition_penalty` r (HF/vLLM): for every token seen in the prompt or the output so far, z/r if z > 0,
   else z*r.
3. `presence_penalty` p and `frequency_penalty` f (OpenAI), output tokens only: z - f*count - p*(count > 0).
   -> these are the *processed logits*; logprobs are log_softmax of them (the vLLM "processed logprobs"
   convention: after penalties and bias, before temperature/top-k/top-p/min-p).
4. temperature 0: greedy, argmax of the processed logits (ties: lowest id). Otherwise z/T, then
5. `top_k` (k > 0): keep tokens whose logit >= the k-th largest (ties at the boundary kept);
6. `top_p` on the renormalized top-k distribution: sort descending (stable), keep the shortest prefix whose
   mass reaches p (a token is kept when the mass before it is < p, so at least one), then every token with a
   logit >= the last kept one (ties kept);
7. `min_p` m: keep tokens with p_i >= m * p_max, computed as z_i - z_max >= log(m);
8. sample: argmax(z_i + G_i) over the kept tokens with Gumbel noise G = -log(-log(u)), which is the
   exponential race argmax(p_i / E_i), E = -log(u) ~ Exp(1), written in log space: no softmax, no
   multinomial, no host sync.
   Then rows with a grammar (structured output) get -inf at every token their grammar does not allow next
   (a bitmask from the row's matcher, engine/structured/); rows without one are untouched.
9. thinking budget: if `thinking_budget` is set and the row has generated >= that many tokens without
   producing `think_end_token_id`, that token is forced (its logprob is reported as computed in 3).

Reproducibility: u is a pure function of (seed, step, token id): a splitmix64 stream keyed by the row's seed
and its step number (= tokens generated so far), hashed with int64 torch ops (wrapping multiply, masked shifts:
bit-identical on CPU and GPU), its top 53 bits made a float64 uniform in (0, 1) and the double log taken in
float64 before rounding to float32, so CPU and GPU noise agree (checked bit for bit on an H200). So a row
samples the same tokens whatever its batch, its position in it, or the device, given the same logits.

Two paths, chosen by the row's own top_k (never by the batch): rows with 0 < top_k <= CANDIDATES (256) do
steps 5-8 on their 256 largest logits only (noise only at those ids; the race over the whole vocabulary would
pick the same token, tested); the others filter the whole vocabulary (a full sort when top_p < 1). top_p's
softmax and cumsum are the only float reductions besides the logits; each runs per row over a width fixed by
the row's path, so it is the same in every batch.

Cost (H200, V = 248,320, measured): the GPU work is 0.1-0.2 ms at 8 lanes (4 ms at 64 lanes with top_p and no
top_k: the full sort and cumsum); the host spends 0.1 ms (greedy) to about 1 ms (top_k + top_p; up to 2 ms
with penalties and logprobs) launching up to ~60 small kernels, which overlaps a CUDA-graph model step because
nothing here waits for the GPU (host data goes through pinned copies). On the GPU the candidate path after its top-k
(filters, noise, race) is one Triton launch (ops/triton/sample_candidates.py, same tokens; HINFER_SAMPLER_KERNEL=0
runs the torch body): sampled decode with the Qwen defaults +5.4% on the 35B-A3B at one lane (bench/RESULTS.md).

Penalty state: the sampler owns a [max_rows, V] int32 table of output-token counts and a [max_rows, V] bool
prompt mask, indexed by `RowState.slot` (the engine's lane id). `add_row` resets a slot when a request starts,
`update` adds the tokens a step produced (one scatter for all rows) and advances `num_generated` and the
`</think>` flag. Rows with neutral penalties skip both.

Stop tokens, stop strings and max_tokens are the engine's.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hinfer.engine.protocol import TopLogprob
from hinfer.engine.structured.counters import GrammarCounters
from hinfer.sampling_params import SamplingParams

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15  # splitmix64 increment
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
CANDIDATES = 256  # rows with 0 < top_k <= this sample among their 256 largest logits (fast path)


def _s64(x: int) -> int:
    """An unsigned 64-bit value as the signed int64 torch stores."""
    x &= MASK64
    return x - (1 << 64) if x >> 63 else x


def mix64_py(x: int) -> int:
    """splitmix64 finalizer on Python ints (reference; also builds the per-row keys on the host)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finalizer on int64 tensors; multiplies wrap mod 2^64 on CPU and CUDA alike."""
    x = (x ^ _shr(x, 30)) * _s64(MIX1)
    x = (x ^ _shr(x, 27)) * _s64(MIX2)
    return x ^ _shr(x, 31)


def row_key(seed: int, step: int) -> int:
    """The stream key of one row at one step (unsigned 64-bit)."""
    return mix64_py(mix64_py(seed) + (step + 1) * GAMMA)


def gumbel_noise(keys: torch.Tensor, id_gamma: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise, float32, a pure function of (key, token id): keys [B] with id_gamma = (id+1)*GAMMA
    as [1, V] (every id) or [B, W] (chosen ids) -> [B, V] or [B, W]."""
    bits = _shr(mix64(keys[:, None] + id_gamma), 11)  # top 53 bits
    u = (bits.to(torch.float64) + 0.5) * (2.0**-53)  # exact, in (0, 1)
    return (-torch.log(-torch.log(u))).to(torch.float32)


def vocab_gamma(vocab_size: int, device: torch.device | str) -> torch.Tensor:
    ids = torch.arange(1, vocab_size + 1, dtype=torch.int64, device=device)
    return ids * _s64(GAMMA)


@dataclass
class RowState:
    """One running request as the sampler sees it. The engine owns it and keeps it across steps."""

    params: SamplingParams
    seed: int  # always set (the engine seeds unseeded requests)
    slot: int = 0  # row of the sampler's penalty tables: the engine's lane id, < max_rows
    prompt_ids: Sequence[int] = ()
    num_generated: int = 0  # tokens generated so far = the step number of the next token
    think_ended: bool = False  # think_end_token_id was produced
    grammar: object | None = None  # structured output: a GrammarState (engine/structured/grammar.py)

    @property
    def has_penalties(self) -> bool:
        p = self.params
        return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0

    @property
    def force_think_end(self) -> bool:
        p = self.params
        return (p.thinking_budget is not None and p.think_end_token_id is not None and not self.think_ended
                and self.num_generated >= p.thinking_budget)


@dataclass
class SampleOutput:
    token_ids: torch.Tensor  # [B] int64, on the logits' device
    logprobs: torch.Tensor | None = None  # [B] float32: of the chosen token; when any row asked
    top_ids: torch.Tensor | None = None  # [B, N] int64, N = the largest top-N asked (may be 0)
    top_logprobs: torch.Tensor | None = None  # [B, N] float32

    def to_host(self, rows: Sequence[RowState]) -> tuple[list[int], list[float | None], list[list[TopLogprob] | None]]:
        """(token ids, chosen-token logprob per row, top-N per row): None for rows that asked none."""
        ids = self.token_ids.tolist()
        if self.logprobs is None:
            return ids, [None] * len(ids), [None] * len(ids)
        lp = self.logprobs.tolist()
        tid, tlp = self.top_ids.tolist(), self.top_logprobs.tolist()
        lps: list[float | None] = []
        tops: list[list[TopLogprob] | None] = []
        for i, r in enumerate(rows):
            n = r.params.logprobs
            lps.append(None if n is None else lp[i])
            tops.append(None if n is None else [TopLogprob(t, v) for t, v in zip(tid[i][:n], tlp[i][:n])])
        return ids, lps, tops


class Sampler:
    def __init__(self, vocab_size: int, device: torch.device | str, max_rows: int = 64,
                 num_real_tokens: int | None = None) -> None:
        """`num_real_tokens`: ids at and above it (vocabulary padding) are never sampled, when given."""
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.max_rows = max_rows
        self.num_real_tokens = num_real_tokens
        self._gamma = vocab_gamma(vocab_size, self.device)
        # Penalty tables, allocated once (vocab x lanes x 5 bytes, in the memory plan's "sampler state").
        self.counts = torch.zeros((max_rows, vocab_size), dtype=torch.int32, device=self.device)
        self.prompt_mask = torch.zeros((max_rows, vocab_size), dtype=torch.bool, device=self.device)
        self.grammar_counters = GrammarCounters()  # host time of the structured-output work

    # ---- per-request state --------------------------------------------------------------------------------
    def add_row(self, row: RowState) -> None:
        """A request starts on `row.slot`: reset its penalty state (prompt tokens for repetition_penalty)."""
        if not 0 <= row.slot < self.max_rows:
            raise ValueError(f"sampler slot {row.slot} out of range (max_rows {self.max_rows})")
        bad = [t for t in row.params.logit_bias if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise ValueError(f"logit_bias token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        if not row.has_penalties:
            return
        self.counts[row.slot].zero_()
        self.prompt_mask[row.slot].zero_()
        if row.params.repetition_penalty != 1.0 and len(row.prompt_ids):
            ids = to_device(list(row.prompt_ids), torch.int64, self.device)
            self.prompt_mask[row.slot].index_fill_(0, ids, True)

    def advance(self, rows: Sequence[RowState], token_ids: torch.Tensor) -> None:
        """`update` for a step whose tokens the host has not read (a decode step run ahead): each row's step
        number moves on by one and the penalty counts take the tokens from the device. Rows with a grammar or a
        thinking budget need the token on the host and never come here (ModelRunner.can_run_ahead)."""
        pen = []
        for i, r in enumerate(rows):
            r.num_generated += 1
            if r.has_penalties:
                pen.append(i)
        if pen:
            slots = to_device([rows[i].slot for i in pen], torch.int64, self.device)
            ones = torch.ones(len(pen), dtype=torch.int32, device=self.device)
            self.counts.index_put_((slots, take_rows(token_ids, pen)), ones, accumulate=True)

    def update(self, rows: Sequence[RowState], token_ids: Sequence[int] | Sequence[Sequence[int]]) -> None:
        """Record what each row produced this step (one id, or a list with speculative decoding)."""
        slots: list[int] = []
        toks: list[int] = []
        for r, t in zip(rows, token_ids, strict=True):
            new = [int(x) for x in t] if isinstance(t, list | tuple) else [int(t)]
            r.num_generated += len(new)
            end = r.params.think_end_token_id
            if end is not None and end in new:
                r.think_ended = True
            if r.grammar is not None:
                t0 = time.perf_counter()
                for t in new:
                    r.grammar.accept(t)
                self.grammar_counters.accept_s += time.perf_counter() - t0
                self.grammar_counters.accepted += len(new)
            if r.has_penalties:
                slots += [r.slot] * len(new)
                toks += new
        if toks:
            idx = to_device([slots, toks], torch.int64, self.device)
            ones = torch.ones(len(toks), dtype=torch.int32, device=self.device)
            self.counts.index_put_((idx[0], idx[1]), ones, accumulate=True)

    # ---- the step -----------------------------------------------------------------------------------------
    def sample(self, logits: torch.Tensor, rows: Sequence[RowState]) -> SampleOutput:
        """logits [B, V] (fp32), one row per RowState -> SampleOutput. Reads nothing back to the host."""
        b, v = logits.shape
        if b != len(rows) or v != self.vocab_size:
            raise ValueError(f"logits {tuple(logits.shape)} for {len(rows)} rows, vocab {self.vocab_size}")
        fpar, ipar = self._params(rows, logits.device)
        z = self._process(logits, rows, fpar, ipar)
        p = [r.params for r in rows]
        dev = logits.device

        # Sampled rows take one of two paths, chosen by the row's own top_k so that never depends on the batch.
        cand = [i for i, x in enumerate(p) if not x.greedy and 0 < x.top_k <= CANDIDATES]
        full = [i for i, x in enumerate(p) if not x.greedy and not 0 < x.top_k <= CANDIDATES]
        if len(cand) == b or len(full) == b:  # the common case, one path for all: no gather/scatter launches
            path = self._sample_candidates if cand else self._sample_full
            token = path(z / fpar[:, 0:1], ipar[:, 0], ipar[:, 1], fpar[:, 1:2], fpar[:, 2:3], p)
        else:
            token = torch.argmax(z, dim=-1)  # greedy rows keep this
            if cand or full:
                sel = to_device(cand + full, torch.int64, dev)
                # (advanced indexing, not index_select: the latter is very slow for long rows on the CPU)
                fs, is_ = fpar[sel], ipar[sel]
                zt = z[sel] / fs[:, 0:1]
                nc = len(cand)
                parts = []
                if cand:
                    parts.append(self._sample_candidates(zt[:nc], is_[:nc, 0], is_[:nc, 1], fs[:nc, 1:2],
                                                         fs[:nc, 2:3], [p[i] for i in cand]))
                if full:
                    parts.append(self._sample_full(zt[nc:], is_[nc:, 0], is_[nc:, 1], fs[nc:, 1:2], fs[nc:, 2:3],
                                                   [p[i] for i in full]))
                token = token.index_copy(0, sel, torch.cat(parts))
        if any(r.force_think_end for r in rows):
            token = torch.where(ipar[:, 2] != 0, ipar[:, 3], token)

        out = SampleOutput(token)
        want = [x.logprobs for x in p if x.logprobs is not None]
        if want:
            lse = torch.logsumexp(z, dim=-1, keepdim=True)
            out.logprobs = (z.gather(1, token[:, None]) - lse)[:, 0]
            top_v, top_i = torch.topk(z, max(want), dim=-1)
            out.top_ids, out.top_logprobs = top_i, top_v - lse
        return out

    def processed_logits(self, logits: torch.Tensor, rows: Sequence[RowState]) -> torch.Tensor:
        """[B, V] logits after padding mask, logit_bias and penalties (what logprobs are computed from)."""
        return self._process(logits, rows, *self._params(rows, logits.device))

    def _params(self, rows: Sequence[RowState], dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row parameters as one float32 [B, 6] and one int64 [B, 5] tensor (two host->device copies)."""
        p = [r.params for r in rows]
        fpar = to_device([[x.temperature if x.temperature > 0 else 1.0, x.top_p,
                            math.log(x.min_p) if x.min_p > 0 else -math.inf,
                            x.repetition_penalty, x.presence_penalty, x.frequency_penalty] for x in p],
                          torch.float32, dev)
        ipar = to_device([[_s64(row_key(r.seed, r.num_generated)), max(x.top_k, 0),
                            int(r.force_think_end), x.think_end_token_id or 0, r.slot]
                           for r, x in zip(rows, p)], torch.int64, dev)
        return fpar, ipar

    def _process(self, logits: torch.Tensor, rows: Sequence[RowState], fpar: torch.Tensor,
                 ipar: torch.Tensor) -> torch.Tensor:
        z = logits.float().clone()
        if self.num_real_tokens is not None and self.num_real_tokens < z.shape[1]:
            z[:, self.num_real_tokens:] = -math.inf
        self._apply_bias(z, [r.params for r in rows])
        if any(r.has_penalties for r in rows):
            z = self._apply_penalties(z, ipar[:, 4], fpar[:, 3:4], fpar[:, 4:5], fpar[:, 5:6])
        self._apply_grammars(z, rows)
        return z

    def _apply_grammars(self, z: torch.Tensor, rows: Sequence[RowState]) -> None:
        """Mask what each constrained row's grammar forbids next (one bitmask copy for all such rows)."""
        live = [i for i, r in enumerate(rows) if r.grammar is not None and r.grammar.active]
        if not live:
            return
        from hinfer.engine.structured.bitmask import apply_token_bitmask

        words = -(-z.shape[1] // 32)
        t0 = time.perf_counter()
        bitmask = torch.full((len(live), words), -1, dtype=torch.int32)
        for j, i in enumerate(live):
            rows[i].grammar.fill(bitmask, j)
        t1 = time.perf_counter()
        if z.device.type != "cpu":
            bitmask = bitmask.pin_memory()
        apply_token_bitmask(z, live, bitmask)
        c = self.grammar_counters
        c.steps, c.masks = c.steps + 1, c.masks + len(live)
        c.fill_s += t1 - t0
        c.apply_s += time.perf_counter() - t1

    def _apply_bias(self, z: torch.Tensor, p: list[SamplingParams]) -> None:
        rows_i: list[int] = []
        toks: list[int] = []
        vals: list[float] = []
        for i, x in enumerate(p):
            for t, val in x.logit_bias.items():
                rows_i.append(i)
                toks.append(int(t))
                vals.append(float(val))
        if rows_i:
            idx = to_device([rows_i, toks], torch.int64, z.device)
            val_t = to_device(vals, torch.float32, z.device)
            z.index_put_((idx[0], idx[1]), val_t, accumulate=True)

    def _apply_penalties(self, z: torch.Tensor, slots: torch.Tensor, rep: torch.Tensor, pres: torch.Tensor,
                         freq: torch.Tensor) -> torch.Tensor:
        counts = self.counts[slots]
        seen = (counts > 0) | self.prompt_mask[slots]
        z = torch.where(seen, torch.where(z > 0, z / rep, z * rep), z)
        return z - freq * counts.to(torch.float32) - pres * (counts > 0).to(torch.float32)

    def _sample_candidates(self, zt: torch.Tensor, keys: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                           log_min_p: torch.Tensor, p: list[SamplingParams]) -> torch.Tensor:
        """Rows with 0 < top_k <= CANDIDATES: everything happens on their CANDIDATES largest logits (a fixed
        width, so top_p's sums do not depend on other rows), noise only at those ids."""
        vals, ids = torch.topk(zt, min(CANDIDATES, zt.shape[1]), dim=-1)  # sorted descending
        if zt.is_cuda and os.environ.get("HINFER_SAMPLER_KERNEL", "1") != "0":  # the rest in one launch
            from hinfer.ops.triton.sample_candidates import sample_candidates

            return sample_candidates(vals, ids, keys, top_k, top_p, log_min_p, any(x.top_p < 1.0 for x in p),
                                     any(x.min_p > 0 for x in p))  # fmt: skip
        vals = candidate_filters(vals, top_k, top_p, log_min_p, p)
        choice = torch.argmax(vals + gumbel_noise(keys, self._gamma[ids]), dim=-1, keepdim=True)
        return ids.gather(1, choice)[:, 0]

    def _sample_full(self, zt: torch.Tensor, keys: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                     log_min_p: torch.Tensor, p: list[SamplingParams]) -> torch.Tensor:
        """Rows without a small top_k: filters over the whole vocabulary, noise at every id."""
        v = zt.shape[1]
        if any(x.top_k > 0 for x in p):  # top_k > CANDIDATES here
            kk = min(v, max(x.top_k for x in p))
            k = top_k.clamp(max=v)
            kth = torch.topk(zt, kk, dim=-1).values.gather(1, (k - 1).clamp(min=0)[:, None])
            zt = torch.where((zt >= kth) | (k[:, None] == 0), zt, -math.inf)
        if any(x.top_p < 1.0 for x in p):
            srt, _ = torch.sort(zt, dim=-1, descending=True, stable=True)
            last = _top_p_threshold(srt, top_p)
            zt = torch.where(zt >= last, zt, -math.inf)
        if any(x.min_p > 0 for x in p):
            zmax = zt.max(dim=-1, keepdim=True).values
            zt = torch.where(zt - zmax >= log_min_p, zt, -math.inf)
        return torch.argmax(zt + gumbel_noise(keys, self._gamma[None, :]), dim=-1)


def to_device(data: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Host data to the device without stalling the host: a copy from pageable memory waits for the GPU to
    drain, which would serialize the sampler's launches behind the model; a pinned one is queued."""
    if device.type == "cpu":
        return torch.tensor(data, dtype=dtype)
    return torch.tensor(data, dtype=dtype, pin_memory=True).to(device, non_blocking=True)


def take_rows(t: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """t[idx] with the index queued to the device (no host wait); t itself when idx is every row in order."""
    if idx == list(range(t.shape[0])):
        return t
    return t.index_select(0, to_device(idx, torch.int64, t.device))


def put_rows(t: torch.Tensor, idx: list[int], v: torch.Tensor) -> None:
    """t[idx] = v (distinct rows) with the index queued to the device."""
    t.index_copy_(0, to_device(idx, torch.int64, t.device), v.to(t.dtype))


def _top_p_threshold(srt: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[B, 1] smallest kept logit under top_p, given logits sorted descending (-inf where top_p is 1)."""
    probs = torch.softmax(srt, dim=-1)
    before = torch.nn.functional.pad(torch.cumsum(probs, dim=-1)[:, :-1], (1, 0))  # mass strictly before
    n_keep = (before < top_p).sum(dim=-1, keepdim=True).clamp(min=1)
    last = srt.gather(1, n_keep - 1)
    return torch.where(top_p < 1.0, last, -math.inf)


def candidate_filters(vals: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, log_min_p: torch.Tensor,
                      p: list[SamplingParams]) -> torch.Tensor:  # fmt: skip
    """top_k (ties kept), top_p, min_p on each row's candidates (its largest logits, sorted descending; top_k [B]
    int64 >= 1, top_p and log_min_p [B, 1]): the rest -inf."""
    kth = vals.gather(1, (top_k.clamp(max=vals.shape[1]) - 1)[:, None])
    return _top_p_min_p(torch.where(vals >= kth, vals, -math.inf), top_p, log_min_p, p)


def _top_p_min_p(vals: torch.Tensor, top_p: torch.Tensor, log_min_p: torch.Tensor,
                 p: list[SamplingParams]) -> torch.Tensor:
    """top_p then min_p on logits sorted descending (masked entries -inf)."""
    if any(x.top_p < 1.0 for x in p):
        vals = torch.where(vals >= _top_p_threshold(vals, top_p), vals, -math.inf)
    if any(x.min_p > 0 for x in p):
        vals = torch.where(vals - vals[:, :1] >= log_min_p, vals, -math.inf)
    return vals
