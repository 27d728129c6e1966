"""SamplingParams: what one request asks of the sampler. Shared by the Python API, the engine and the server."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StructuredOutput:
    """What the answer must look like; the engine compiles it into a grammar (engine/structured/, xgrammar).
    Exactly one of `json_schema`, `regex`, `tools` is set."""

    json_schema: dict[str, Any] | bool | None = None  # JSON text valid under this schema (True: any JSON value)
    regex: str | None = None
    # OpenAI-shaped function tools ({"type": "function", "function": {name, parameters}}): the answer is Qwen
    # tool calls to them; `tool_name` forces that one tool (one call), else at least one call of any.
    tools: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    parallel_tool_calls: bool = True
    # With tools: free text in which every `<tool_call>` must go on as a valid call (tool_choice auto, when the
    # server constrains tool calls) instead of an answer of calls only.
    tools_optional: bool = False
    # With tools: {tool name: {"parameter", "syntax" ("lark" | "regex"), "definition"}}: that tool's call is its one
    # string parameter written in this grammar (the Responses API's custom tools) instead of checked by its schema.
    tool_grammars: dict[str, dict[str, str]] | None = None
    # The prompt ends inside an open `<think>`: the reasoning runs free up to `</think>`, then the constraint.
    after_reasoning: bool = False
    # Longest run of whitespace between JSON tokens (tool arguments included): ample for pretty-printing, and a
    # model that keeps emitting blanks cannot stall inside the value.
    max_json_whitespace: int = 16

    def validate(self) -> None:
        if sum(x is not None for x in (self.json_schema, self.regex, self.tools)) != 1:
            raise ValueError("structured output needs exactly one of json_schema, regex, tools")
        if self.tools is not None and not self.tools:
            raise ValueError("structured output with tools needs at least one tool")
        depth = nesting_depth(self.json_schema if self.tools is None else self.tools)
        if depth > MAX_SCHEMA_NESTING:
            raise ValueError(f"the schema nests {depth} levels of objects and arrays deep; at most "
                             f"{MAX_SCHEMA_NESTING} are taken (a grammar's compile time grows with the cube of it)")


# A JSON schema's nesting (objects and arrays, the schema document's own): compiling its grammar takes 0.04 s at 100
# levels, 0.7 s at 400, 6.7 s at 800 (xgrammar, a chain of nested objects); real schemas stay under 40 levels.
MAX_SCHEMA_NESTING = 128


def nesting_depth(value: Any) -> int:
    """How many levels of dicts and lists `value` nests (0 for a scalar); iterative, so no depth overflows it."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest

# Bounds keep every parameter finite through the sampler's float32 arithmetic (z / temperature, z / penalty):
# a float64 like 3.5e38 is inf in float32, and inf / inf is NaN, which argmax then "picks".
MAX_TEMPERATURE = 100.0
GREEDY_BELOW = 1e-5  # temperatures under this sample as greedy (0 included): z / T would only add rounding noise
REPETITION_PENALTY_RANGE = (0.01, 100.0)
MAX_LOGIT_BIAS = 100.0
MAX_TOP_K = 2**31 - 1


class InvalidSamplingParam(ValueError):
    """A sampling parameter out of range; `param` names it for the API's error."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


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
    structured: StructuredOutput | None = None  # constrained decoding (docs/structured-output.md)
    # Log-probabilities of the prompt's tokens (first one None): the prefill computes every position's logits
    # and the prefix cache is bypassed (cached tokens have none). N: plus the top N at each position.
    prompt_logprobs: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        """Raise ValueError with a user-facing message (naming the parameter) for out-of-range values."""
        for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise InvalidSamplingParam(name, f"{name} must be a finite number")
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise InvalidSamplingParam("temperature", f"temperature must be in [0, {MAX_TEMPERATURE:g}]")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidSamplingParam("top_p", "top_p must be in (0, 1]")
        if not -1 <= self.top_k <= MAX_TOP_K:
            raise InvalidSamplingParam("top_k", f"top_k must be -1, 0 (disabled) or a positive integer up to "
                                                f"{MAX_TOP_K}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidSamplingParam("min_p", "min_p must be in [0, 1]")
        lo, hi = REPETITION_PENALTY_RANGE
        if not lo <= self.repetition_penalty <= hi:
            raise InvalidSamplingParam("repetition_penalty", f"repetition_penalty must be in [{lo:g}, {hi:g}]")
        if any(not math.isfinite(v) or abs(v) > MAX_LOGIT_BIAS for v in self.logit_bias.values()):
            raise InvalidSamplingParam("logit_bias",
                                       f"logit_bias values must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise InvalidSamplingParam(name, f"{name} must be in [-2, 2]")
        if self.max_tokens < 1:
            raise InvalidSamplingParam("max_tokens", "max_tokens must be >= 1")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidSamplingParam("logprobs", "logprobs must be in [0, 20]")
        if self.thinking_budget is not None and self.thinking_budget < 0:
            raise InvalidSamplingParam("thinking_budget", "thinking budget must be >= 0")
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= 20:
            raise InvalidSamplingParam("prompt_logprobs", "prompt_logprobs must be in [0, 20]")
        if self.structured is not None:
            self.structured.validate()
