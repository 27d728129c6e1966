"""The token after each verified row of sampled lanes, on the device, before the host reads the acceptance.

A lane whose drafts are deterministic (one-point q: the head's argmax) and whose target distribution lies among
its CANDIDATES largest logits (0 < top_k <= CANDIDATES, no penalties, bias, grammar or thinking budget) can be
judged row by row without knowing how many drafts came before: at row j, draft d is accepted with probability
p_j(d) (q(d) = 1), and if it is not, the lane's last token is the race over p_j with d removed (the residual
max(0, p_j - q_j)); the bonus row's token is the race over p_k. So each row's "next token" (the draft where it is
accepted, the residual's draw where not) is known on the device at once, as a greedy lane's argmax is, and the
drafter's pass over the round can be queued behind verification for sampled lanes too (decoder.py's early pass).
A row's pick is its draft exactly where the draft was accepted (the residual excludes it), so the host reads the
picks alone, as for greedy lanes; a lane keeps its leading accepted drafts and the pick after them, which is
exactly what verify.accept gives with the same uniforms and noise (same keys, same candidates, the same float32
probabilities), so the tokens do not depend on which path judged the round.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch

from hinfer.engine.sampler import CANDIDATES, Sampler, candidate_filters, gumbel_noise, to_device
from hinfer.engine.spec.dist import ACCEPT, RESAMPLE, Position, filter_params, spec_keys, uniforms


def draws_among_candidates(p: Position) -> bool:
    """Whether a sampled lane's rows can be judged on the device: its distribution is a function of the logits
    alone and lies among the CANDIDATES largest (processed logits = raw ones / temperature)."""
    r, x = p.row, p.row.params
    return (not x.greedy and 0 < x.top_k <= CANDIDATES and not x.logit_bias and not r.has_penalties
            and r.grammar is None and x.thinking_budget is None and x.logprobs is None)  # fmt: skip


def sampled_picks(
    sampler: Sampler,
    logits: torch.Tensor,  # [R, V] the sampled lanes' verify rows, t per lane
    lanes: Sequence[Position],  # each lane's position before its round (no drafted prefix)
    drafts: torch.Tensor,  # [R] int64: row j's draft (the token after it in the round), -1 on each bonus row
    t: int,
    gamma: torch.Tensor,  # vocab_gamma
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (pick [R] int64, accepted [R] bool): per row, the draft if accepted there, else the residual's draw."""
    dev = logits.device
    params = [p.row.params for p in lanes for _ in range(t)]
    # their processed logits are the raw ones but for the padding ids, and temperature keeps the order: the top-k of
    # the real ids' raw logits, then the division on the candidates alone (the same values as dividing every logit)
    real = logits[:, : sampler.num_real_tokens] if sampler.num_real_tokens is not None else logits
    vals, ids = torch.topk(real, min(CANDIDATES, real.shape[1]), dim=-1)
    vals = vals.float() / to_device([[x.temperature] for x in params], torch.float32, dev)
    top_k, top_p, log_min_p = filter_params(params, dev)
    firsts = [(p.row.seed, p.row.num_generated) for p in lanes]
    u = uniforms(spec_keys([(s, n + j) for s, n in firsts for j in range(t)], ACCEPT, dev))
    race_keys = spec_keys([f for f in firsts for _ in range(t)], RESAMPLE, dev)
    if vals.is_cuda and os.environ.get("HINFER_SPEC_PICKS_KERNEL", "0") == "1":  # the rest in one launch
        from hinfer.ops.triton.sample_candidates import judge_candidates

        return judge_candidates(vals, ids, race_keys, top_k, top_p, log_min_p, any(x.top_p < 1.0 for x in params),
                                any(x.min_p > 0 for x in params), drafts, u)  # fmt: skip
    return judge_candidates_ref(vals, ids, race_keys, top_k, top_p, log_min_p, params, drafts, u, gamma)


def judge_candidates_ref(vals: torch.Tensor, ids: torch.Tensor, race_keys: torch.Tensor, top_k: torch.Tensor,
                         top_p: torch.Tensor, log_min_p: torch.Tensor, params: list, drafts: torch.Tensor,
                         u: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Rows' candidates (vals [R, W] descending, ids) -> (pick, accepted): the sampler's filters and softmax, the
    draft accepted where u < p(draft), else the race over the residual (the draft's probability removed)."""
    probs = torch.softmax(candidate_filters(vals, top_k, top_p, log_min_p, params), dim=-1)
    is_draft = ids == drafts[:, None]
    p_draft = torch.where(is_draft, probs, 0.0).sum(dim=-1)
    accepted = (u < p_draft.double()) & (drafts >= 0)  # q(d) = 1: accept with probability p(d)
    residual = torch.where(is_draft, -math.inf, torch.log(probs))  # max(0, p - q) with q one-point at d
    drawn = ids.gather(1, torch.argmax(residual + gumbel_noise(race_keys, gamma[ids]), dim=-1, keepdim=True))[:, 0]
    return torch.where(accepted, drafts, drawn), accepted
