"""A drafter for tests that runs the real MTP drafter and checks it against the head recomputed from scratch, then
lets another drafter propose (shared by the speculative-decoding tests of text and image prompts)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hinfer.engine.sequence import Sequence
from hinfer.engine.spec import DraftJob, MTPDrafter, Proposal

# (the drafter, a lane, its draft count) -> (the head's hidden state at each draft step, its k greedy drafts)
FromScratch = Callable[[MTPDrafter, Sequence, int], tuple[list[torch.Tensor], list[int]]]


class PeekDrafter:
    """Runs the MTP drafter (so its KV sees exactly what the engine feeds it) and checks it against the head
    recomputed from scratch over the whole sequence (`from_scratch`): the hidden state after the fed rows (which
    attends to every earlier position's KV) and the greedy drafts. Then proposes what `then` proposes (the known
    continuation: rounds accept several drafts and the head is fed several positions at once)."""

    def __init__(self, mtp: MTPDrafter, then, from_scratch: FromScratch) -> None:
        self.mtp, self.then, self.from_scratch = mtp, then, from_scratch
        self.checked = 0
        self.outs: list[torch.Tensor] = []
        forward = mtp.forward

        def peek(chunks, hidden, ids=None, argmax=False):
            out = forward(chunks, hidden, ids, argmax)
            self.outs.append(out[0].clone())  # a graph output is overwritten by its next replay
            return out

        mtp.forward = peek

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        self.outs.clear()
        props = self.mtp.draft(jobs)
        asked = [(job, prop) for job, prop in zip(jobs, props) if prop is not None]
        for job, prop in asked:
            hs, drafts = self.from_scratch(self.mtp, job.seq, job.num_drafts)
            assert prop.settle() == drafts, (prop.settle(), drafts)
            for step, h in enumerate(hs):  # forward `step` has a row per job still drafting, in order
                r = [j for j, _ in asked if j.num_drafts > step].index(job)
                assert torch.allclose(self.outs[step][r], h, atol=1e-4, rtol=1e-4), step
            self.checked += 1
        return self.then.draft(jobs)
