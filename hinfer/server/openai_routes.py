"""OpenAI routes: POST /v1/chat/completions, POST /v1/completions."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from hinfer.server import sse
from hinfer.server.errors import openai_body
from hinfer.server.generation import EngineRun, engine_error, log_failure, run_to_end
from hinfer.server.openai_convert import chat_logprobs, chat_prompt, completion_prompt, sampling_params
from hinfer.server.openai_responses import ChatBuilder, CompletionBuilder
from hinfer.server.prompt import plan_max_tokens, render_prompt
from hinfer.server.schemas_openai import ChatCompletionRequest, CompletionRequest
from hinfer.server.state import get_state, new_id

log = logging.getLogger(__name__)
router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    prompt, budget = chat_prompt(body, st.preserve_thinking_default)
    ids = render_prompt(st.tokenizer, prompt, st.prompt_guard)
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = plan_max_tokens(len(ids), requested, st.engine.max_context, param)
    sp = sampling_params(body, max_tokens=max_tokens, vocab_size=st.tokenizer.vocab_size,
                         logprobs=chat_logprobs(body), skip_special_tokens=body.skip_special_tokens)
    if budget is not None and st.tokenizer.think_end_id is not None:
        sp.thinking_budget = budget
        sp.think_end_token_id = st.tokenizer.think_end_id

    run = EngineRun(st, new_id("chatcmpl-"), ids, sp, request)
    b = ChatBuilder(st, run, model=body.model, reasoning=prompt.enable_thinking, tools=prompt.parse_tools(),
                    logprobs=sp.logprobs is not None, max_calls=prompt.max_calls)
    await run.start()
    if body.stream:
        run.unwatch()
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_chat_stream(run, b, include_usage), media_type="text/event-stream",
                                 headers=sse.STREAM_HEADERS, background=BackgroundTask(run.close))
    await run_to_end(run, b.feed)
    b.finish()
    return JSONResponse(b.response())


async def _chat_stream(run: EngineRun, b: ChatBuilder, include_usage: bool) -> AsyncIterator[bytes]:
    try:
        yield sse.data(b.chunk({"role": "assistant", "content": ""}))
        async for ev in run.events():
            delta, lp = b.feed(ev)
            if delta or lp:
                yield sse.data(b.chunk(delta, logprobs=lp))
        delta = b.finish()
        if delta:
            yield sse.data(b.chunk(delta))
        yield sse.data(b.chunk({}, finish_reason=b.finish_reason(), timings=b.run.timings()))
        if include_usage:
            yield sse.data(b.usage_chunk())
        yield sse.DONE
    except Exception as e:
        log_failure(run, e)
        yield sse.data(openai_body(engine_error(e)))
        yield sse.DONE
    finally:
        await run.close()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    ids, prompt_text = completion_prompt(body, st.tokenizer)
    max_tokens = plan_max_tokens(len(ids), body.max_tokens, st.engine.max_context)
    sp = sampling_params(body, max_tokens=max_tokens, vocab_size=st.tokenizer.vocab_size,
                         logprobs=body.logprobs, skip_special_tokens=body.skip_special_tokens)
    run = EngineRun(st, new_id("cmpl-"), ids, sp, request)
    b = CompletionBuilder(st, run, model=body.model, logprobs=sp.logprobs is not None,
                          echo=prompt_text if body.echo else None)
    await run.start()
    if body.stream:
        run.unwatch()
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_completion_stream(run, b, include_usage), media_type="text/event-stream",
                                 headers=sse.STREAM_HEADERS, background=BackgroundTask(run.close))
    await run_to_end(run, b.feed)
    return JSONResponse(b.response())


async def _completion_stream(run: EngineRun, b: CompletionBuilder, include_usage: bool) -> AsyncIterator[bytes]:
    try:
        if b.echo:
            yield sse.data(b.chunk(b.echo))
        async for ev in run.events():
            text, lp = b.feed(ev)
            if text or lp:
                yield sse.data(b.chunk(text, logprobs=lp))
        yield sse.data(b.chunk("", finish_reason=b.finish_reason(), timings=run.timings()))
        if include_usage:
            yield sse.data({"id": b.id, "object": "text_completion", "created": b.created, "model": b.model,
                            "choices": [], "usage": b.usage(), "timings": run.timings()})
        yield sse.DONE
    except Exception as e:
        log_failure(run, e)
        yield sse.data(openai_body(engine_error(e)))
        yield sse.DONE
    finally:
        await run.close()
