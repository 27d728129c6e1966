"""One engine run of a Responses request: everything checked and its prompt rendered (`prepare`), then its
generation started with the builder that answers it (`start`). A compaction run (`compacting`: compaction.py)
asks for the conversation's summary and is answered by one compaction item (CompactionBuilder)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from hinfer.sampling_params import SamplingParams
from hinfer.server.generation import EngineRun
from hinfer.server.ids import new_id
from hinfer.server.images import with_images
from hinfer.server.prompt import ChatPrompt, plan_max_tokens, render_prompt_off_loop
from hinfer.server.responses_convert import chat_prompt, sampling_params
from hinfer.server.responses_stream import CompactionBuilder, ResponseBuilder
from hinfer.server.responses_tools import ToolNames
from hinfer.server.schemas_responses import ResponsesRequest
from hinfer.server.state import ServerState
from hinfer.server.structured import constraint, responses_text_format


@dataclass
class Prepared:
    prompt: ChatPrompt
    names: ToolNames  # how its tool calls go back
    ids: list[int]  # the prompt's token ids, each image's tokens included
    images: list[Any]  # the images' inputs for the engine
    sampling: SamplingParams
    compacting: bool


async def prepare(st: ServerState, body: ResponsesRequest, items: list[dict[str, Any]],
                  compacting: bool) -> Prepared:  # fmt: skip
    """The run of `items` (the whole conversation) under the request's fields, checked (a 400 here) and rendered;
    nothing runs yet."""
    prompt, budget, names = chat_prompt(body, items, st.preserve_thinking_default, compacting)
    schema = None if compacting else responses_text_format(body.text)
    ids = await render_prompt_off_loop(st.tokenizer, prompt, st.prompt_guard)
    ids, images = await with_images(st, prompt, ids, param="input")  # each image's tokens counted in usage
    max_tokens = plan_max_tokens(len(ids), body.max_output_tokens, st.engine.max_context, "max_output_tokens",
                                 prompt_param="input")
    if compacting and body.max_output_tokens is None:
        max_tokens = min(max_tokens, st.compaction_max_tokens)
    sp = sampling_params(body, max_tokens, st.engine.sampling_defaults)
    if budget is not None and prompt.enable_thinking and st.tokenizer.think_end_id is not None:
        sp.thinking_budget = budget
        sp.think_end_token_id = st.tokenizer.think_end_id
    sp.structured = constraint(prompt, schema, param="text.format", tool_grammar=st.tool_call_grammar)
    return Prepared(prompt, names, ids, images, sp, compacting)


async def start(st: ServerState, body: ResponsesRequest, p: Prepared,
                http: HTTPConnection) -> tuple[EngineRun, ResponseBuilder]:  # fmt: skip
    """The prepared generation started, its first event awaited (engine refusals raise here)."""
    response_id = new_id("resp_")
    run = EngineRun(st, response_id, p.ids, p.sampling, http, p.images)
    builder = CompactionBuilder if p.compacting else ResponseBuilder
    b = builder(run, body, p.prompt, p.names, response_id=response_id)
    await run.start()
    return run, b
