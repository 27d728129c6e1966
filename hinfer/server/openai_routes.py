"""OpenAI routes: POST /v1/chat/completions, POST /v1/completions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from hinfer.server import sse
from hinfer.server.choices import (
    check_choices,
    choice_seed,
    close_all,
    merged_events,
    run_all_to_end,
    start_all,
)
from hinfer.server.errors import bad_request, openai_body
from hinfer.server.generation import EngineRun, engine_error, log_failure
from hinfer.server.ids import new_id
from hinfer.server.images import with_images
from hinfer.server.openai_convert import (
    chat_logprobs,
    chat_prompt,
    chat_prompt_logprobs,
    completion_prompts,
    sampling_params,
)
from hinfer.server.openai_responses import (
    ChatBuilder,
    CompletionBuilder,
    chat_response,
    chat_usage,
    completion_response,
    completion_usage,
)
from hinfer.server.openapi_responses import OPENAI_ERRORS, STREAMED
from hinfer.server.prompt import plan_max_tokens, render_prompt_off_loop
from hinfer.server.schemas_openai import ChatCompletionRequest, CompletionRequest
from hinfer.server.state import get_state
from hinfer.server.structured import calls_under_grammar, constraint, openai_response_format, vllm_extras

router = APIRouter(responses=OPENAI_ERRORS)


@router.post("/v1/chat/completions", responses=STREAMED)
async def chat_completions(body: ChatCompletionRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    prompt, budget = chat_prompt(body, st.preserve_thinking_default)
    schema = openai_response_format(body.response_format)
    ids = await render_prompt_off_loop(st.tokenizer, prompt, st.prompt_guard)
    ids, images = await with_images(st, prompt, ids)  # each image's tokens counted in the prompt's usage
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = plan_max_tokens(len(ids), requested, st.engine.max_context, param)
    sp = sampling_params(body, max_tokens=max_tokens, vocab_size=st.tokenizer.vocab_size,
                         logprobs=chat_logprobs(body), skip_special_tokens=body.skip_special_tokens,
                         defaults=st.engine.sampling_defaults)
    if budget is not None and st.tokenizer.think_end_id is not None:
        sp.thinking_budget = budget
        sp.think_end_token_id = st.tokenizer.think_end_id
    sp.structured = constraint(prompt, schema, vllm_extras(body.model_extra or {}), tool_grammar=st.tool_call_grammar)
    sp.prompt_logprobs = chat_prompt_logprobs(body)  # the first choice's run scores the prompt, which all share

    n = check_choices(body.n)
    chat_id = new_id("chatcmpl-")
    runs, builders = [], []
    for k in range(n):
        run = EngineRun(st, chat_id if k == 0 else f"{chat_id}-{k}", ids,
                        sp if k == 0 else replace(sp, seed=choice_seed(sp.seed, k), prompt_logprobs=None), request,
                        images)  # fmt: skip
        runs.append(run)
        builders.append(ChatBuilder(st, run, model=body.model, reasoning=prompt.starts_in_reasoning(),
                                    tools=prompt.parse_tools(), logprobs=sp.logprobs is not None,
                                    max_calls=prompt.max_calls, trim_strings=calls_under_grammar(sp.structured),
                                    response_id=chat_id, index=k, custom=prompt.custom_tools))  # fmt: skip
    await start_all(runs)
    if body.stream:
        for r in runs:
            r.unwatch()
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_chat_stream(runs, builders, include_usage), media_type="text/event-stream",
                                 headers=sse.STREAM_HEADERS, background=BackgroundTask(close_all, runs))
    await run_all_to_end(runs, [b.feed for b in builders])
    for b in builders:
        b.finish()
    return JSONResponse(chat_response(builders))


def _chat_close(b: ChatBuilder) -> list[bytes]:
    delta = b.finish()
    out = [sse.data(b.chunk(delta))] if delta else []
    return out + [sse.data(b.chunk({}, finish_reason=b.finish_reason(), timings=b.run.timings()))]


async def _chat_stream(runs: list[EngineRun], bs: list[ChatBuilder], include_usage: bool) -> AsyncIterator[bytes]:
    try:
        for b in bs:
            yield sse.data(b.chunk({"role": "assistant", "content": ""}))
        open_choices = set(range(len(bs)))
        async for i, ev in merged_events(runs):
            b = bs[i]
            delta, lp = b.feed(ev)
            if delta or lp:
                yield sse.data(b.chunk(delta, logprobs=lp))
            if ev.finish_reason is not None:
                open_choices.discard(i)
                for chunk in _chat_close(b):
                    yield chunk
        for i in sorted(open_choices):  # a stream that ended without a final event still closes its choice
            for chunk in _chat_close(bs[i]):
                yield chunk
        if include_usage:
            yield sse.data(bs[0].usage_chunk(chat_usage(bs)))
        yield sse.DONE
    except Exception as e:
        log_failure(runs[0], e)
        yield sse.data(openai_body(engine_error(e)))
        yield sse.DONE
    finally:
        await close_all(runs)


@router.post("/v1/completions", responses=STREAMED)
async def completions(body: CompletionRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    prompts = await asyncio.to_thread(completion_prompts, body, st.tokenizer)  # off the loop, as chat's
    n = check_choices(body.n, len(prompts))
    score_only = body.max_tokens == 0  # prompt scoring (lm-evaluation-harness loglikelihood): echo + logprobs
    if score_only and not body.echo:
        raise bad_request("max_tokens 0 is only allowed with echo (prompt scoring)", param="max_tokens")
    response_id, created = new_id("cmpl-"), int(time.time())
    runs, builders = [], []
    for ids, text in prompts:
        max_tokens = plan_max_tokens(len(ids), 1 if score_only else body.max_tokens, st.engine.max_context,
                                     prompt_param="prompt")  # fmt: skip
        for j in range(n):
            sp = sampling_params(body, max_tokens=max_tokens, vocab_size=st.tokenizer.vocab_size,
                                 logprobs=None if score_only else body.logprobs,
                                 skip_special_tokens=body.skip_special_tokens,
                                 defaults=st.engine.sampling_defaults)  # fmt: skip
            sp.seed = choice_seed(sp.seed, j)
            sp.structured = vllm_extras(body.model_extra or {})
            if body.echo and body.logprobs is not None:
                sp.prompt_logprobs = body.logprobs
            k = len(runs)
            run = EngineRun(st, response_id if k == 0 else f"{response_id}-{k}", ids, sp, request)
            runs.append(run)
            builders.append(CompletionBuilder(st, run, response_id=response_id, index=k, model=body.model,
                                              created=created, logprobs=body.logprobs is not None,
                                              echo=text if body.echo else None, score_only=score_only))
    await start_all(runs)
    if body.stream:
        for r in runs:
            r.unwatch()
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_completion_stream(runs, builders, n, include_usage),
                                 media_type="text/event-stream", headers=sse.STREAM_HEADERS,
                                 background=BackgroundTask(close_all, runs))
    await run_all_to_end(runs, [b.feed for b in builders])
    return JSONResponse(completion_response(builders, n))


async def _completion_stream(runs: list[EngineRun], bs: list[CompletionBuilder], n: int,
                             include_usage: bool) -> AsyncIterator[bytes]:
    try:
        async for i, ev in merged_events(runs):
            b = bs[i]
            text, lp = b.feed(ev)
            if text or lp:
                yield sse.data(b.chunk(text, logprobs=lp))
            if ev.finish_reason is not None:
                yield sse.data(b.chunk("", finish_reason=b.finish_reason(), timings=runs[i].timings()))
        if include_usage:
            b = bs[0]
            yield sse.data({"id": b.id, "object": "text_completion", "created": b.created, "model": b.model,
                            "choices": [], "usage": completion_usage(bs, n), "timings": runs[0].timings()})
        yield sse.DONE
    except Exception as e:
        log_failure(runs[0], e)
        yield sse.data(openai_body(engine_error(e)))
        yield sse.DONE
    finally:
        await close_all(runs)
