"""Speculative acceptance: keep the longest prefix of drafts the target agrees with, then one more token.

Standard rejection sampling (Leviathan et al. 2023; Chen et al. 2023), per lane, for positions j = 0..k-1:
accept draft d_{j+1} with probability min(1, p_j(d) / q_j(d)); at the first rejection draw the lane's last
token from norm(max(0, p_j - q_j)); when all k are accepted draw the bonus token from p_k. The output then
follows the target distribution p exactly, whatever q is. Greedy lanes are the one-hot special case (p and q
one-hot): accept while the draft equals the target's argmax, and the last token is that argmax. Lanes are
padded to the round's widest K and judged in one batch of tensor ops; the only host sync is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def accept(
    p: torch.Tensor,  # [L, K+1, V] target probabilities per position
    q: torch.Tensor,  # [L, K, V] draft probabilities the drafts were drawn from (one-hot for deterministic drafts)
    drafts: torch.Tensor,  # [L, K] int64 (padding anything in range)
    num_drafts: torch.Tensor,  # [L] int64, k of each lane (<= K)
    u: torch.Tensor,  # [L, K] float64 uniforms in (0, 1), one per judged draft
    race: Callable[[torch.Tensor], torch.Tensor],  # [L, V] unnormalized probabilities -> a token per lane (seeded)
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (accepted drafts a [L], the token after them [L], drawn by `race` from the residual)."""
    n_lanes, width = drafts.shape
    lane = torch.arange(n_lanes, device=p.device)
    if width:
        pd = p[:, :width].gather(2, drafts[..., None])[..., 0].double()
        qd = q.gather(2, drafts[..., None])[..., 0].double()
        ok = (u * qd < pd) & (torch.arange(width, device=p.device)[None, :] < num_drafts[:, None])  # u < p/q
        a = ok.long().cumprod(dim=1).sum(dim=1)
        rejected = (a < num_drafts)[:, None]
        qa = torch.where(rejected, q[lane, a.clamp(max=width - 1)], 0.0)
    else:
        a = torch.zeros(n_lanes, dtype=torch.int64, device=p.device)
        qa = torch.zeros_like(p[:, 0])
    pa = p[lane, a]
    residual = (pa - qa).clamp(min=0.0)
    # p == q leaves no residual mass, but then the draft was accepted surely; guard the division anyway
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, pa)
    return a, race(residual)
