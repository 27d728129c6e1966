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


class DeviceDrafts:
    """A round's drafts where the drafter left them: on the device, [lanes, width] int64 (row r: lane r's
    tokens, then zeros), with a copy to pinned host memory queued behind them. Verification takes `dev` as its
    input without the host waiting for the tokens; the host reads them afterwards, when the copy has long
    arrived (one wait per round instead of one before the verify launch). Any tokens the host reads while the
    GPU goes on with later work travel the same way (the verify rows' argmax ahead of the early draft pass)."""

    def __init__(self, dev: torch.Tensor) -> None:
        self.dev = dev
        self._done: torch.cuda.Event | None = None
        self._host = dev
        if dev.is_cuda:
            self._host = torch.empty(dev.shape, dtype=dev.dtype, pin_memory=True)
            self._host.copy_(dev, non_blocking=True)
            self._done = torch.cuda.Event()
            self._done.record()
        self._rows: list[list[int]] | None = None

    def row(self, r: int, n: int) -> list[int]:
        if self._rows is None:
            if self._done is not None:
                self._done.synchronize()
            self._rows = self._host.tolist()
        return self._rows[r][:n]


@dataclass
class Proposal:
    tokens: list[int]  # at most the job's num_drafts; empty while `pending` holds them
    # [len(tokens), V] the distribution each token was drawn from (after the request's sampler processing);
    # None: deterministic drafts (q is one-hot at the token), the right thing for greedy requests
    probs: torch.Tensor | None = None
    pending: tuple[DeviceDrafts, int, int] | None = None  # (the round's drafts, this lane's row, its count)

    @property
    def count(self) -> int:
        return self.pending[2] if self.pending is not None else len(self.tokens)

    def settle(self) -> list[int]:
        """The tokens on the host (reading them from the device copy if they are still pending)."""
        if self.pending is not None:
            d, r, n = self.pending
            self.tokens, self.pending = d.row(r, n), None
        return self.tokens


class Drafter(Protocol):
    # whether it runs a model over the jobs' hidden rows (MTP): the decoder then gathers a lane's plain steps
    # into one job (SpecDecoder._defer_observations); a drafter without the attribute counts as reading them
    reads_hidden: bool

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        """One entry per job: a Proposal when num_drafts > 0 (it may hold fewer tokens), else None."""
        ...
