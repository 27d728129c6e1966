"""The drafter seam: what a speculative round asks of whatever proposes tokens.

After every engine step the decoder hands the drafter one `DraftJob` per running lane that will speculate: the
positions the target just ran for it (final prompt tokens, or the accepted part of a verified round), the token
that followed each of them, and the target's final-normed hidden state there; plus how many tokens to draft for
the lane's next round (0 for a prompt chunk that is not the last: the MTP head still has to see it). The
drafter answers a `Proposal` per job that asked for drafts.

`MTPDrafter` (mtp.py) is the default; tests plug in drafters that know the answer, or get it wrong on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from hinfer.engine.sequence import Sequence


@dataclass
class DraftJob:
    seq: Sequence
    start: int  # position of the first row fed
    next_ids: list[int]  # for each fed position q, the token at q + 1 (all final)
    hidden: torch.Tensor  # [len(next_ids), H] the target's final-normed hidden states at those positions
    num_drafts: int  # tokens to propose for the next round (0: only observe)


@dataclass
class Proposal:
    tokens: list[int]  # at most the job's num_drafts
    # [len(tokens), V] the distribution each token was drawn from (after the request's sampler processing);
    # None: deterministic drafts (q is one-hot at the token), the right thing for greedy requests
    probs: torch.Tensor | None = None


class Drafter(Protocol):
    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        """One entry per job: a Proposal when num_drafts > 0 (it may hold fewer tokens), else None."""
        ...
