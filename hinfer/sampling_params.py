"""SamplingParams: what one request asks of the sampler. Shared by the Python API, the engine and the server."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: disabled
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)  # stop strings, matched on the detokenized text
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to the model's eos ids
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; 0: the sampled token's; N: plus the top N
    # Thinking budget: after this many generated tokens with no `</think>`, the sampler forces
    # `think_end_token_id` (the server sets both from the request and the tokenizer).
    thinking_budget: int | None = None
    think_end_token_id: int | None = None
    skip_special_tokens: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        """Raise ValueError with a user-facing message for out-of-range values."""
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < -1:
            raise ValueError("top_k must be -1, 0 (disabled) or a positive integer")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError("min_p must be in [0, 1]")
        if self.repetition_penalty <= 0:
            raise ValueError("repetition_penalty must be > 0")
        if not -2.0 <= self.presence_penalty <= 2.0 or not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError("presence_penalty and frequency_penalty must be in [-2, 2]")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError("logprobs must be in [0, 20]")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise ValueError("thinking budget must be >= 0")
