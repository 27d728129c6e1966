"""Sequence: one request's life inside the engine (tokens, pages, GDN slot, stop handling, timings)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from hinfer.engine.stop import StopStringMatcher
from hinfer.sampling_params import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    output_ids: list[int] = field(default_factory=list)
    num_cached: int = 0  # tokens already run through the model (KV written, GDN state advanced)
    pages: list[int] = field(default_factory=list)
    slot: int = -1  # GDN state slot
    draft_slots: list[int] = field(default_factory=list)  # speculative: state after each verified position
    lane: int = -1  # lane id (sampler row)
    status: Status = Status.WAITING
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    detok: object | None = None  # IncrementalDetokenizer
    stop_matcher: StopStringMatcher | None = None
    text: str = ""
    arrival: float = field(default_factory=time.monotonic)
    admitted: float = 0.0
    first_token: float = 0.0
    last_token: float = 0.0
    sampler_state: object | None = None  # the sampler's per-row state
    spec_drafted: int = 0
    spec_accepted: int = 0
    drafts: object | None = None  # speculative: the drafter's proposal for the next round (spec.Proposal)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def in_prefill(self) -> bool:
        return self.num_cached < len(self.prompt_ids)

    def pending_tokens(self) -> list[int]:
        """Tokens not yet run through the model: the rest of the prompt, or the last sampled token."""
        n = len(self.prompt_ids)
        if self.num_cached >= n:  # decode: never copy a long prompt per step
            return self.output_ids[self.num_cached - n :]
        return self.prompt_ids[self.num_cached :] + self.output_ids

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_ids) + self.params.max_tokens
