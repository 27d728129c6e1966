"""The distribution the sampler draws from, at speculative positions, and the seeded noise of speculation.

A verify pass judges several positions of one request at once; position j sits after j drafted tokens that the
sampler has not recorded yet. Its distribution must be the one the plain sampler would use had those tokens
been generated: penalties count them, the step number (thinking budget) advances past them. We get that from
the sampler itself (`Sampler.processed_logits`), with the drafted prefix added to its penalty counts for the
duration of the call, then apply the sampler's filters (temperature, top_k, top_p, min_p: the semantics
written in sampler.py, full-vocabulary form) to turn processed logits into probabilities. Greedy rows and
rows whose `</think>` is forced are one-hot.

Randomness is a pure function of (seed, token index, purpose), like the sampler's own noise, so a request
speculates the same way whatever its batch; `DRAFT`, `ACCEPT` and `RESAMPLE` keep the streams apart from each
other and from the sampler's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from hinfer.engine.sampler import (
    CANDIDATES,
    MASK64,
    RowState,
    Sampler,
    _s64,
    _top_p_threshold,
    candidate_filters,
    gumbel_noise,
    mix64,
    put_rows,
    row_key,
    take_rows,
    to_device,
)
from hinfer.sampling_params import SamplingParams

# stream domains (xor-ed into the seed): arbitrary odd 64-bit constants
DRAFT = 0x6A09E667F3BCC909
ACCEPT = 0xBB67AE8584CAA73B
RESAMPLE = 0x3C6EF372FE94F82B


@dataclass
class Position:
    """One row of logits to judge: the request, and the tokens drafted before it that the sampler has not seen."""

    row: RowState
    prefix: Sequence[int] = ()


def spec_keys(
    seeds_and_indices: Sequence[tuple[int, int]], domain: int, device: torch.device
) -> torch.Tensor:
    """[N] int64 stream keys for (seed, token index) pairs in one purpose's domain."""
    keys = [_s64(row_key((seed ^ domain) & MASK64, idx)) for seed, idx in seeds_and_indices]
    return to_device(keys, torch.int64, device)


def uniforms(keys: torch.Tensor) -> torch.Tensor:
    """A float64 uniform in (0, 1) per key (top 53 bits of the mixed key)."""
    bits = (mix64(keys) >> 11) & ((1 << 53) - 1)
    return (bits.to(torch.float64) + 0.5) * (2.0**-53)


def race_noise(draws: Sequence[tuple[int, int] | None], domain: int, gamma: torch.Tensor) -> torch.Tensor:
    """[N, V] Gumbel noise for rows drawn at random ((seed, token index) in `domain`), zeros for the rest (greedy
    rows: their distributions are one-hot, so the argmax needs no noise)."""
    noise = torch.zeros((len(draws), gamma.shape[0]), dtype=torch.float32, device=gamma.device)
    rand = [i for i, d in enumerate(draws) if d is not None]
    if rand:
        keys = spec_keys([draws[i] for i in rand], domain, gamma.device)
        put_rows(noise, rand, gumbel_noise(keys, gamma[None, :]))
    return noise


def draw(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` [N, V]: the exponential race in log space (argmax where noise is 0)."""
    return torch.argmax(torch.log(probs) + noise, dim=-1)


def draw_among_candidates(probs: torch.Tensor, draws: Sequence[tuple[int, int] | None], domain: int,
                          gamma: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """draw(probs, race_noise(draws, domain, gamma)) for rows with at most CANDIDATES nonzero probabilities
    (candidate rows, one-hot rows): the race among each row's CANDIDATES largest probabilities, the noise hashed at
    those ids only (the same values: noise is a function of the id), where the whole race hashes every id."""
    vals, ids = torch.topk(probs, min(CANDIDATES, probs.shape[1]), dim=-1)
    noise = torch.zeros_like(vals)
    rand = [i for i, d in enumerate(draws) if d is not None]
    if rand:
        keys = spec_keys([draws[i] for i in rand], domain, probs.device)
        put_rows(noise, rand, gumbel_noise(keys, gamma[take_rows(ids, rand)]))
    return ids.gather(1, torch.argmax(torch.log(vals) + noise, dim=-1, keepdim=True))[:, 0]


def racer(draws: Sequence[tuple[int, int] | None], domain: int, gamma: torch.Tensor,
          few: bool) -> Callable[[torch.Tensor], torch.Tensor]:  # fmt: skip
    """The seeded race that draws one token per row of (unnormalized) probabilities [N, V]: among each row's
    candidates when every row has few nonzero probabilities (`few`, few_nonzero), else over every id."""
    if few:
        return lambda probs: draw_among_candidates(probs, draws, domain, gamma)
    return lambda probs: draw(probs, race_noise(draws, domain, gamma))


def few_nonzero(p: Position) -> bool:
    """Whether the position's distribution has at most CANDIDATES nonzero probabilities (sampling_probs): greedy,
    a forced `</think>`, or 0 < top_k <= CANDIDATES."""
    x = p.row.params
    return x.greedy or 0 < x.top_k <= CANDIDATES or forces_think_end(p)


def position_row(p: Position) -> RowState:
    """The row's sampler state as if its prefix had been generated (step number, `</think>` seen)."""
    end = p.row.params.think_end_token_id
    ended = p.row.think_ended or (end is not None and end in p.prefix)
    return replace(p.row, num_generated=p.row.num_generated + len(p.prefix), think_ended=ended)


def forces_think_end(p: Position) -> bool:
    """position_row(p).force_think_end without building the row: only a thinking budget forces `</think>` (this
    runs for every verified row on the host's path between a round's read and the next launch)."""
    return p.row.params.thinking_budget is not None and position_row(p).force_think_end


def plain_greedy(p: Position) -> bool:
    """A greedy position whose processed logits are the raw ones but for the padding mask (no logit bias, no
    penalties, no grammar, no forced `</think>`): its token is the raw argmax over the real ids."""
    r = p.row
    return (r.params.greedy and not r.params.logit_bias and not r.has_penalties and r.grammar is None
            and not forces_think_end(p))  # fmt: skip


def real_argmax(logits: torch.Tensor, real: int | None) -> torch.Tensor:
    """[N] the argmax of each row over the first `real` ids (the tokenizer's; None: all): plain greedy tokens."""
    return torch.argmax(logits if real is None else logits[:, :real], dim=-1)


def processed_logits(sampler: Sampler, logits: torch.Tensor, positions: Sequence[Position]) -> torch.Tensor:
    """[N, V] logits after padding mask, bias, penalties and grammar, with each position's prefix counted (a
    grammar's mask is the one after the prefix: grammar_masks)."""
    rows = [replace(position_row(p), grammar=None) for p in positions]
    counted = [i for i, p in enumerate(positions) if p.row.has_penalties and len(p.prefix)]
    if not counted:
        z = sampler.processed_logits(logits, rows)
        grammar_masks(z, positions)
        return z
    z = torch.empty_like(logits, dtype=torch.float32)
    skip = set(counted)
    plain = [i for i in range(len(positions)) if i not in skip]
    if plain:
        put_rows(z, plain, sampler.processed_logits(take_rows(logits, plain), [rows[i] for i in plain]))
    # One group per prefix length: a lane then appears at most once, so its count row holds one prefix at a time.
    groups: dict[int, list[int]] = {}
    for i in counted:
        groups.setdefault(len(positions[i].prefix), []).append(i)
    for idx in groups.values():
        slots = [positions[i].row.slot for i in idx]
        assert len(set(slots)) == len(slots), "one prefix per lane and call"
        flat_slots = [positions[i].row.slot for i in idx for _ in positions[i].prefix]
        flat_toks = [int(t) for i in idx for t in positions[i].prefix]
        where = to_device([flat_slots, flat_toks], torch.int64, sampler.device)
        ones = torch.ones(len(flat_toks), dtype=sampler.counts.dtype, device=sampler.device)
        sampler.counts.index_put_((where[0], where[1]), ones, accumulate=True)
        try:
            put_rows(z, idx, sampler.processed_logits(take_rows(logits, idx), [rows[i] for i in idx]))
        finally:  # the counts belong to the sampler: leave them as found
            sampler.counts.index_put_((where[0], where[1]), -ones, accumulate=True)
    grammar_masks(z, positions)
    return z


def grammar_masks(z: torch.Tensor, positions: Sequence[Position]) -> None:
    """In place: each constrained position's row masked as its grammar allows after the position's drafted
    prefix. A lane's positions have nested prefixes (a round's drafts[:j], a draft step's drafts so far): its
    matcher takes the drafts in order, fills each position's mask, and rolls back to where it was. A draft the
    grammar refuses ends the walk; the positions after it (never reached: that draft is rejected) get the mask
    at the refusal."""
    live = [i for i, p in enumerate(positions) if p.row.grammar is not None and p.row.grammar.active]
    if not live:
        return
    from hinfer.engine.structured.bitmask import apply_token_bitmask

    bitmask = torch.full((len(live), -(-z.shape[1] // 32)), -1, dtype=torch.int32)
    lanes: dict[int, list[tuple[int, int]]] = {}  # grammar -> (bitmask row, position), shortest prefix first
    for j, i in enumerate(live):
        lanes.setdefault(id(positions[i].row.grammar), []).append((j, i))
    for group in lanes.values():
        group.sort(key=lambda e: len(positions[e[1]].prefix))
        matcher, taken, ok = positions[group[0][1]].row.grammar.matcher, 0, True
        longest = list(positions[group[-1][1]].prefix)
        for j, i in group:
            prefix = positions[i].prefix
            assert list(prefix) == longest[: len(prefix)], "a lane's positions have nested prefixes"
            while ok and taken < len(prefix):
                ok = matcher.accept_token(int(prefix[taken]))
                taken += ok
            matcher.fill_next_token_bitmask(bitmask, j)
        if taken:
            matcher.rollback(taken)
    if z.device.type != "cpu":
        bitmask = bitmask.pin_memory()
    apply_token_bitmask(z, live, bitmask)


def cut_at_grammar_end(row: RowState, tokens: list[int], vocab_size: int) -> list[int]:
    """A round's tokens up to the one that completes the lane's grammar (plain decoding stops there: nothing but
    a stop token could follow), its matcher left where it was."""
    g = row.grammar
    if g is None or not g.active:
        return tokens
    taken, end = 0, len(tokens)
    for n, t in enumerate(tokens):
        if not g.matcher.accept_token(int(t)):
            break
        taken += 1
        if g.must_stop(vocab_size):
            end = n + 1
            break
    if taken:
        g.matcher.rollback(taken)
    return tokens[:end]


def sampling_probs(z: torch.Tensor, positions: Sequence[Position]) -> torch.Tensor:
    """[N, V] float32 probabilities the sampler draws from, given processed logits z (see sampler.py, 4-9)."""
    rows = [position_row(p) for p in positions]
    # one-hot rows: a forced `</think>`, and greedy (argmax of the processed logits, lowest id on ties)
    fixed = {i: int(r.params.think_end_token_id) for i, r in enumerate(rows) if r.force_think_end}
    greedy = [i for i, r in enumerate(rows) if r.params.greedy and i not in fixed]
    rand = [i for i, r in enumerate(rows) if not r.params.greedy and i not in fixed]
    probs = torch.zeros_like(z, dtype=torch.float32)
    if rand:
        put_rows(probs, rand, _filtered_softmax(take_rows(z, rand), [rows[i].params for i in rand]))
    if greedy or fixed:
        dev, v = z.device, z.shape[1]
        tok = torch.cat([to_device(list(fixed.values()), torch.int64, dev), torch.argmax(take_rows(z, greedy), dim=-1)])
        put_rows(probs, list(fixed) + greedy, torch.nn.functional.one_hot(tok, v))
    return probs


def _filtered_softmax(z: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Temperature, then top_k (ties kept), top_p (on the top_k renormalized mass), min_p; softmax of the rest.
    Rows with 0 < top_k <= CANDIDATES over their CANDIDATES largest logits, as the sampler draws them (a top-k
    of each row, where the whole-vocabulary form sorts it: the Qwen checkpoints' default top_k 20 with top_p 0.95
    would sort every verify and draft row of 248K logits); the others over the whole vocabulary."""
    dev = z.device
    zt = z / to_device([[x.temperature] for x in params], torch.float32, dev)
    cand = [i for i, x in enumerate(params) if 0 < x.top_k <= CANDIDATES]
    if len(cand) == len(params):
        return _candidate_softmax(zt, params)
    if not cand:
        return _vocab_softmax(zt, params)
    rest = sorted(set(range(len(params))) - set(cand))
    out = torch.empty_like(zt)
    put_rows(out, cand, _candidate_softmax(take_rows(zt, cand), [params[i] for i in cand]))
    put_rows(out, rest, _vocab_softmax(take_rows(zt, rest), [params[i] for i in rest]))
    return out


def _candidate_softmax(zt: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Sampler._sample_candidates' filters on each row's CANDIDATES largest logits, their softmax scattered into
    whole-vocabulary rows (zero elsewhere)."""
    vals, ids = torch.topk(zt, min(CANDIDATES, zt.shape[1]), dim=-1)  # sorted descending
    vals = candidate_filters(vals, *filter_params(params, zt.device), params)
    return torch.zeros_like(zt).scatter_(1, ids, torch.softmax(vals, dim=-1))


def filter_params(params: Sequence[SamplingParams], dev: torch.device) -> tuple[torch.Tensor, ...]:
    """The rows' top_k [N] int64, top_p and log(min_p) [N, 1] float32, as sampler.candidate_filters takes them."""
    return (to_device([x.top_k for x in params], torch.int64, dev),
            to_device([[x.top_p] for x in params], torch.float32, dev),
            to_device([[math.log(x.min_p) if x.min_p > 0 else -math.inf] for x in params], torch.float32, dev))  # fmt: skip


def _vocab_softmax(zt: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The filters over the whole vocabulary (rows without a small top_k), then the softmax."""
    dev, v = zt.device, zt.shape[1]
    if any(x.top_k > 0 for x in params):
        ks = [min(max(x.top_k, 0), v) for x in params]
        k = to_device(ks, torch.int64, dev)
        kth = torch.topk(zt, max(ks), dim=-1).values.gather(1, (k - 1).clamp(min=0)[:, None])
        zt = torch.where((zt >= kth) | (k[:, None] == 0), zt, -math.inf)
    if any(x.top_p < 1.0 for x in params):
        top_p = to_device([[x.top_p] for x in params], torch.float32, dev)
        srt, _ = torch.sort(zt, dim=-1, descending=True, stable=True)
        zt = torch.where(zt >= _top_p_threshold(srt, top_p), zt, -math.inf)
    if any(x.min_p > 0 for x in params):
        log_min_p = to_device(
            [[math.log(x.min_p) if x.min_p > 0 else -math.inf] for x in params], torch.float32, dev
        )
        zt = torch.where(zt - zt.max(dim=-1, keepdim=True).values >= log_min_p, zt, -math.inf)
    return torch.softmax(zt, dim=-1)
