"""The engine's interface to its callers (server, Python API, benchmarks).

The server talks only to this surface, so a scripted token source (tests) and the real engine are
interchangeable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from hinfer.model.image_prompt import ImageInput
from hinfer.sampling_defaults import SamplingDefaults
from hinfer.sampling_params import SamplingParams


class EngineError(Exception):
    """Base for errors the engine reports about one request; the server maps them to HTTP codes."""


class QueueFullError(EngineError):
    """The pending queue holds --max-pending-requests already (HTTP 429)."""


class QueueTimeoutError(EngineError):
    """The request waited in the queue longer than --pending-timeout-ms (HTTP 429, distinct message)."""


class RequestTooLargeError(EngineError):
    """Prompt (+ max_tokens) can never fit --max-context or the KV capacity (HTTP 400)."""


class EngineBrokenError(EngineError):
    """The engine can run no step any more (a tensor-parallel rank gone, the ranks out of step): HTTP 503, and
    /health answers 503 too, so whatever supervises the server restarts it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine cannot run steps any more: {reason}; restart the server")


@dataclass
class GenerationRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    images: list[ImageInput] = field(default_factory=list)  # in prompt order, one placeholder run each
    grammar: Any = None  # `sampling.structured` compiled ahead (a PreparedGrammar, off the engine thread); None:
    # compiled at admission


@dataclass
class TopLogprob:
    token_id: int
    logprob: float


@dataclass
class Timings:
    """Seconds, measured by the engine."""

    queue_s: float = 0.0
    prefill_s: float = 0.0  # admission to first token
    decode_s: float = 0.0  # first token to last token
    per_token_s: float = 0.0  # decode_s / max(1, completion_tokens - 1)
    spec_drafted: int = 0  # speculative decoding counters (0 when off)
    spec_accepted: int = 0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache (included in prompt_tokens)


@dataclass
class TokenEvent:
    """One step's output for one request. A request's stream ends with an event whose finish_reason is set.

    `token_ids` may hold more than one token (speculative decoding accepts several per step) and may be empty
    on the final event. `text` is the detokenized delta (stop strings already cut off).
    """

    request_id: str
    token_ids: list[int]
    text: str
    logprobs: list[float] | None = None  # one per token in token_ids, when requested
    top_logprobs: list[list[TopLogprob]] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort" | None
    stop_reason: str | int | None = None  # the stop string or token id that ended it
    # With SamplingParams.prompt_logprobs, on the request's first event: one per prompt token (the first None)
    prompt_logprobs: list[float | None] | None = None
    prompt_top_logprobs: list[list[TopLogprob] | None] | None = None
    prompt_ranks: list[int | None] | None = None  # each prompt token's rank (1: the likeliest; the first None)
    usage: Usage | None = None  # set on the final event
    cached_tokens: int | None = None  # on the request's first event: prompt tokens the prefix cache gave it
    timings: Timings | None = None  # set on the final event


@dataclass
class EngineStats:
    lanes_total: int = 0
    lanes_busy: int = 0
    queue_depth: int = 0
    pages_total: int = 0
    pages_free: int = 0
    slots_total: int = 0
    slots_free: int = 0
    requests_finished: int = 0
    tokens_generated: int = 0
    prompt_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    broken: str | None = None  # why the engine can run no step any more (EngineBrokenError); None while it can


class AsyncEngine(Protocol):
    """What the server needs. `generate` raises QueueFullError / RequestTooLargeError before yielding,
    and QueueTimeoutError from the iterator if the request is never admitted in time. Leaving the iterator
    early (client gone) or calling `abort` frees the lane and its pages at the next step."""

    model_name: str
    max_context: int
    sampling_defaults: SamplingDefaults  # what a request's omitted sampling fields take

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenEvent]: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def close(self) -> None:
        """After stop, at the end of serving: let go of what the engine started (tensor parallelism's ranks)."""
