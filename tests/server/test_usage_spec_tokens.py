"""Speculative decoding's drafted/accepted tokens in the usage blocks (extension fields, docs/api.md)."""

from __future__ import annotations

from hinfer.engine.protocol import Timings, TokenEvent, Usage
from hinfer.sampling_params import SamplingParams
from hinfer.server.anthropic_responses import MessageBuilder
from hinfer.server.generation import EngineRun
from hinfer.server.openai_responses import ChatBuilder, CompletionBuilder, chat_usage, completion_usage


def finished_run(drafted: int, accepted: int) -> EngineRun:
    run = EngineRun(None, "r1", [7] * 10, SamplingParams(), None)  # type: ignore[arg-type]
    run.final = TokenEvent("r1", [], "", finish_reason="stop", usage=Usage(10, 5, 0),
                           timings=Timings(spec_drafted=drafted, spec_accepted=accepted))  # fmt: skip
    return run


def chat(run: EngineRun) -> ChatBuilder:
    return ChatBuilder(None, run, model="m", reasoning=False, tools=None, logprobs=False)  # type: ignore[arg-type]


def test_openai_usage_sums_spec_tokens_over_choices():
    u = chat_usage([chat(finished_run(6, 4)), chat(finished_run(3, 1))])
    assert (u["spec_drafted_tokens"], u["spec_accepted_tokens"]) == (9, 5)
    done = CompletionBuilder(None, finished_run(6, 4), response_id="c", index=0, model="m",  # type: ignore[arg-type]
                             created=0, logprobs=False, echo=None)
    assert completion_usage([done], 1)["spec_accepted_tokens"] == 4
    assert "spec_drafted_tokens" not in chat_usage([chat(finished_run(0, 0))])  # no speculation: standard shape


def test_anthropic_usage_reports_spec_tokens():
    b = MessageBuilder(finished_run(8, 2), model="m", reasoning=False, tools=None, stop_sequences=[])
    delta = next(e for e in b.start_events() + b.finish_events() if e["type"] == "message_delta")
    assert delta["usage"]["spec_drafted_tokens"] == 8 and delta["usage"]["spec_accepted_tokens"] == 2
