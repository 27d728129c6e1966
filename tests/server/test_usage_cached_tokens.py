"""Prefix-cache hits in the usage blocks: OpenAI prompt_tokens_details.cached_tokens, Anthropic
cache_read_input_tokens (with input_tokens counting only the computed part, as Anthropic does)."""

from __future__ import annotations

from hinfer.engine.protocol import TokenEvent, Usage
from hinfer.sampling_params import SamplingParams
from hinfer.server.anthropic_responses import MessageBuilder, fold
from hinfer.server.generation import EngineRun
from hinfer.server.openai_responses import ChatBuilder, CompletionBuilder, completion_usage


def finished_run(cached: int) -> EngineRun:
    run = EngineRun(None, "r1", [7] * 100, SamplingParams(), None)  # type: ignore[arg-type]
    run.final = TokenEvent("r1", [], "", finish_reason="stop", usage=Usage(100, 5, cached))
    return run


def test_openai_usage_reports_cached_tokens():
    run = finished_run(64)
    chat = ChatBuilder(None, run, model="m", reasoning=False, tools=None, logprobs=False)  # type: ignore[arg-type]
    assert chat.usage()["prompt_tokens"] == 100 and chat.usage()["prompt_tokens_details"] == {"cached_tokens": 64}
    done = CompletionBuilder(None, run, response_id="c", index=0, model="m", created=0,  # type: ignore[arg-type]
                             logprobs=False, echo=None)
    assert completion_usage([done], 1)["prompt_tokens_details"]["cached_tokens"] == 64
    assert ChatBuilder(None, finished_run(0), model="m", reasoning=False, tools=None,  # type: ignore[arg-type]
                       logprobs=False).usage()["prompt_tokens_details"]["cached_tokens"] == 0


def test_anthropic_usage_reports_cache_reads():
    b = MessageBuilder(finished_run(64), model="m", reasoning=False, tools=None, stop_sequences=[])
    events = b.start_events() + b.finish_events()
    delta = next(e for e in events if e["type"] == "message_delta")
    usage = {"input_tokens": 36, "output_tokens": 5, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0}
    assert delta["usage"] == usage and fold(events)["usage"] == delta["usage"]


def test_anthropic_stream_opens_with_its_cache_reads():
    """Clients (Claude Code among them) read a stream's input and cache-read tokens from message_start: the run
    starts on its first event, which carries the count from admission."""
    run = EngineRun(None, "r1", [7] * 100, SamplingParams(), None)  # type: ignore[arg-type]
    run.admitted_cached = 64
    start = MessageBuilder(run, model="m", reasoning=False, tools=None, stop_sequences=[]).start_events()[0]
    assert start["message"]["usage"] == {"input_tokens": 36, "output_tokens": 0, "cache_read_input_tokens": 64,
                                         "cache_creation_input_tokens": 0}


def test_admin_route_clears_the_prefix_cache(tokenizer):
    from scripted_engine import ScriptedEngine
    from starlette.testclient import TestClient

    from hinfer.server import create_app

    plain = ScriptedEngine(tokenizer, {}, default="ok", lanes=1, max_pending=1, max_context=256, model_name="m")
    cached = ScriptedEngine(tokenizer, {}, default="ok", lanes=1, max_pending=1, max_context=256, model_name="m")
    calls: list[int] = []
    cached.clear_prefix_cache = lambda: calls.append(1)  # what the real Engine has
    with TestClient(create_app(cached, tokenizer, model_name="m")) as c:
        assert c.post("/admin/clear_prefix_cache").json() == {"status": "ok"} and calls == [1]
    with TestClient(create_app(plain, tokenizer, model_name="m")) as c:
        assert c.post("/admin/clear_prefix_cache").status_code == 501
