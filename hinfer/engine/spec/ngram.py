"""Prompt-lookup drafts (`--spec ngram`): a lane's drafts are the tokens that followed the latest earlier
occurrence of its last n tokens (n from NGRAM_MAX down to NGRAM_MIN) in its own prompt and output.

No model runs for them: a round costs only its verification rows, and what agents and chat clients send repeats
its context often (a file being edited, a quoted passage, a tool call's arguments, code around a change), where
whole runs of drafts are accepted. Where nothing repeats there is no match and no draft; adaptive speculation
(the default) then keeps the lane on plain steps. Drafts are deterministic (a one-hot proposal), so verification
keeps greedy output identical and sampled output distribution-exact, as with any drafter (dist.py).

The lookup is incremental: per lane, a dict for each n from an n-gram to the position after its latest
occurrence, extended by the tokens that arrived since the lane's last draft, so a round costs O(new tokens),
not a scan of the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hinfer.engine.spec.drafter import DraftJob, Proposal

NGRAM_MAX = 4  # the longest suffix looked up first: longer matches predict better
NGRAM_MIN = 2  # shorter suffixes match everywhere and predict little
# a lane's index starts this many tokens before its first draft: a long prompt is indexed in tens of
# milliseconds on the engine's loop, not seconds (what repeats is mostly recent: the file just read, the last turn)
NGRAM_WINDOW = 16384


@dataclass
class NgramIndex:
    """One lane's lookup: `tokens` seen so far (from position `base`); `last[n][gram]` the index in `tokens` after
    gram's latest occurrence among the n-grams ending before the newest token (the suffix itself is looked up,
    not indexed)."""

    base: int = 0
    tokens: list[int] = field(default_factory=list)
    last: dict[int, dict[tuple[int, ...], int]] = field(default_factory=dict)
    done: int = 0  # the n-grams ending at positions < done are in `last`

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)
        t = self.tokens
        for p in range(self.done, len(t) - 1):  # every n-gram ending before the newest token
            for n in range(NGRAM_MIN, min(NGRAM_MAX, p + 1) + 1):
                self.last.setdefault(n, {})[tuple(t[p + 1 - n : p + 1])] = p + 1
        self.done = max(self.done, len(t) - 1)

    def propose(self, k: int) -> list[int]:
        """Up to k tokens after the latest earlier occurrence of the longest suffix that occurred before."""
        t = self.tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(t) <= n:
                continue
            at = self.last.get(n, {}).get(tuple(t[-n:]))
            if at is not None:
                return t[at : at + k]
        return []


class NgramDrafter:
    """The drafter (drafter.Drafter) that looks its drafts up in the lane's own tokens."""

    reads_hidden = False  # no model runs: the decoder hands it each step's positions as they come

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = []
        for job in jobs:
            index = self._index(job)
            out.append(Proposal(index.propose(job.num_drafts)) if job.num_drafts else None)
        return out

    @staticmethod
    def _index(job: DraftJob) -> NgramIndex:
        """The lane's index, brought up to the job's newest token (the token after its last fed position)."""
        seq = job.seq
        index = seq.draft_index
        newest = job.start + len(job.next_ids) + 1  # tokens known: positions 0 .. start + len(next_ids)
        if not isinstance(index, NgramIndex) or index.base + len(index.tokens) > newest:
            index = seq.draft_index = NgramIndex(base=max(0, job.start + 1 - NGRAM_WINDOW))
        have = index.base + len(index.tokens)  # the next position the index takes
        if have < job.start + 1:  # positions before the fed ones, from the sequence
            index.extend(seq.tokens_between(have, job.start + 1))
            have = job.start + 1
        index.extend(job.next_ids[have - job.start - 1 :])
        return index
