"""Anthropic routes: POST /v1/messages, POST /v1/messages/count_tokens (both after context management:
anthropic_context.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask

from hinfer.server import sse
from hinfer.server.anthropic_compact import block_events, paused_events, summarize
from hinfer.server.anthropic_context import Managed, manage
from hinfer.server.anthropic_convert import chat_prompt, sampling_params
from hinfer.server.anthropic_responses import MessageBuilder, fold
from hinfer.server.errors import anthropic_body
from hinfer.server.generation import EngineRun, engine_error, log_failure, run_to_end
from hinfer.server.ids import new_id
from hinfer.server.images import reads_images, with_images
from hinfer.server.openapi_responses import ANTHROPIC_ERRORS, STREAMED
from hinfer.server.prompt import ChatPrompt, plan_max_tokens, render_prompt_off_loop
from hinfer.server.schemas_anthropic import CountTokensRequest, Message, MessagesRequest
from hinfer.server.state import ServerState, get_state
from hinfer.server.structured import anthropic_output_format, calls_under_grammar, constraint

log = logging.getLogger(__name__)
router = APIRouter(responses=ANTHROPIC_ERRORS)


@router.post("/v1/messages", responses=STREAMED)
async def messages(body: MessagesRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    prompt, budget, ids, managed = await _managed_prompt(st, body)
    compacted = None
    if managed.compact is not None:  # summarize first, then answer from the summary (anthropic_compact.py)
        compacted = await summarize(st, body, managed.messages, managed.compact, request)
        if managed.compact.get("pause_after_compaction"):
            events = paused_events(compacted, body.model, {"applied_edits": managed.applied})
            if body.stream:
                return StreamingResponse(_replay(events), media_type="text/event-stream", headers=sse.STREAM_HEADERS)
            return JSONResponse(fold(events))
        prompt, budget, ids = await _render(st, body, compacted.messages())
    schema = anthropic_output_format(body.output_config)
    ids, images = await with_images(st, prompt, ids)  # each image's tokens counted in the prompt's usage
    max_tokens = plan_max_tokens(len(ids), body.max_tokens, st.engine.max_context)
    sp = sampling_params(body, max_tokens, st.tokenizer.vocab_size, st.engine.sampling_defaults)
    if budget is not None and st.tokenizer.think_end_id is not None:
        sp.thinking_budget = budget
        sp.think_end_token_id = st.tokenizer.think_end_id
    sp.structured = constraint(prompt, schema, param="output_config.format", tool_grammar=st.tool_call_grammar)

    run = EngineRun(st, new_id("msgreq-"), ids, sp, request, images)
    b = MessageBuilder(run, model=body.model, reasoning=prompt.starts_in_reasoning(), tools=prompt.parse_tools(),
                       stop_sequences=sp.stop, max_calls=prompt.max_calls, trim_strings=calls_under_grammar(sp.structured))
    if managed.applied is not None:
        b.context_management = {"applied_edits": managed.applied}
    if compacted is not None:
        b.lead, b.iterations = block_events(compacted, 0), [compacted.usage]
    await run.start()
    if body.stream:
        run.unwatch()
        return StreamingResponse(_stream(run, b), media_type="text/event-stream", headers=sse.STREAM_HEADERS,
                                 background=BackgroundTask(run.close))
    events = b.start_events()
    await run_to_end(run, lambda ev: events.extend(b.feed(ev)))
    events.extend(b.finish_events())
    return JSONResponse(fold(events))


async def _replay(events: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for e in events:
        yield sse.event(e["type"], e)


async def _stream(run: EngineRun, b: MessageBuilder) -> AsyncIterator[bytes]:
    try:
        for e in b.start_events():
            yield sse.event(e["type"], e)
        async for ev in run.events():
            for e in b.feed(ev):
                yield sse.event(e["type"], e)
        for e in b.finish_events():
            yield sse.event(e["type"], e)
    except Exception as exc:
        log_failure(run, exc)
        yield sse.event("error", anthropic_body(engine_error(exc)))
    finally:
        await run.close()


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request):
    st = get_state(request)
    st.check_model(body.model)
    prompt, _, ids, managed = await _managed_prompt(st, body)
    ids, _ = await with_images(st, prompt, ids)
    if managed.original_tokens is None:
        return {"input_tokens": len(ids)}
    return {"input_tokens": len(ids), "context_management": {"original_input_tokens": managed.original_tokens}}


Rendered = tuple[ChatPrompt, int | None, list[int]]  # (prompt, thinking budget, its token ids before images)


async def _render(st: ServerState, body: CountTokensRequest | MessagesRequest, messages: list[Message]) -> Rendered:
    """The request's prompt over `messages` instead of its own, rendered."""
    p, budget = chat_prompt(body.model_copy(update={"messages": messages}), st.preserve_thinking_default,
                            reads_images(st))
    return p, budget, await render_prompt_off_loop(st.tokenizer, p, st.prompt_guard)


async def _managed_prompt(st: ServerState, body: CountTokensRequest | MessagesRequest
                          ) -> tuple[ChatPrompt, int | None, list[int], Managed[Rendered]]:  # fmt: skip
    """The request's prompt after context management (anthropic_context.py): (prompt, thinking budget, its
    token ids before images, what was managed); rendered once, by the count when context management counted."""

    async def count(messages: list[Message]) -> tuple[int, Rendered]:
        r = await _render(st, body, messages)
        return len(r[2]), r

    managed = await manage(body.messages, body.context_management, count)
    rendered = managed.rendered if managed.rendered is not None else await _render(st, body, managed.messages)
    return *rendered, managed
