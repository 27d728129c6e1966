"""Sequence: one request's life inside the engine (tokens, pages, GDN slot, stop handling, timings)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from hinfer.engine.stop import StopStringMatcher
from hinfer.model.image_prompt import ImageInput, PromptImages
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
    grammar: object | None = None  # structured output: GrammarState (engine/structured/), also the sampler row's
    prompt_logprobs: list[float | None] | None = None  # with params.prompt_logprobs: filled by the prefill
    prompt_top_logprobs: list[list | None] | None = None
    prompt_ranks: list[int | None] | None = None  # each prompt token's rank among the vocabulary (1: the likeliest)
    drafts: object | None = None  # speculative: the drafter's proposal for the next round (spec.Proposal)
    spec_lane: object | None = None  # adaptive speculation: the lane's acceptance (spec.adaptive.LaneAcceptance)
    mtp_backlog: list = field(default_factory=list)  # positions not yet fed to the drafter (spec.DraftJob)
    draft_index: object | None = None  # a drafter's own per-lane state (spec.ngram.NgramIndex)
    # prefix cache (prefix_reuse.py)
    cached_tokens: int = 0  # prompt tokens taken from the cache at admission (not computed)
    page_hashes: list[bytes] | None = None  # names of full pages: the prompt's, then the ones filled since
    pages_named: int = 0  # leading pages already registered in the page pool (or shared from it)
    ckpt_targets: list[int] = field(default_factory=list)  # prompt positions where the GDN state is saved
    restore_from: bytes | None = None  # pinned checkpoint copied into `slot` before the first step
    restore_host: bool = False  # restore_from is in host memory (a spilled checkpoint), not a device slot
    restore_pages: list[bytes] = field(default_factory=list)  # pinned host KV pages copied in before the first step
    decode_ckpt: bytes | None = None  # this request's latest checkpoint in its generated text
    # images: their placement in the prompt (positions, placeholder rows, embeddings once encoded), their inputs
    # until encoded, and the prompt as the prefix cache names it (image tokens stand for the image's content)
    images: PromptImages | None = None
    image_inputs: list[ImageInput | None] = field(default_factory=list)  # None once encoded
    hash_ids: list[int] | None = None

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

    def tokens_between(self, start: int, end: int) -> list[int]:
        """Tokens at positions [start, end) of prompt + output as the prefix cache names them (hash_ids for a
        prompt with images), without copying the whole prompt."""
        prompt = self.hash_ids if self.hash_ids is not None else self.prompt_ids
        n = len(prompt)
        if end <= n:
            return prompt[start:end]
        if start >= n:
            return self.output_ids[start - n : end - n]
        return prompt[start:] + self.output_ids[: end - n]

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_ids) + self.params.max_tokens


@dataclass
class ScheduledChunk:
    seq: Sequence
    num_tokens: int  # new tokens of this step for this sequence
    samples: bool  # this chunk ends at the sequence's last known token: a token is sampled after it
    # a prefix-cache checkpoint inside the chunk: the GDN state after its first save_at tokens goes into
    # save_slot (the prefix cache reserves it before the step, PrefixReuse.place_saves)
    save_at: int | None = None
    save_slot: int | None = None

    @property
    def gdn_save(self) -> tuple[int, int] | None:
        """SeqChunk.gdn_save: (offset, slot) of the checkpoint placed inside this chunk, or None."""
        return None if self.save_slot is None else (self.save_at, self.save_slot)
