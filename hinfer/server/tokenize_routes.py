"""vLLM's tokenizer endpoints: POST /tokenize (a raw prompt, or chat messages through the chat template),
POST /detokenize, GET /tokenizer_info. Same shapes as vLLM's, so clients that use a vLLM server as their
tokenizer (lm-eval's `local-completions` by default) work here; errors are OpenAI's."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hinfer.server.errors import bad_request
from hinfer.server.images import with_images
from hinfer.server.openai_convert import chat_prompt
from hinfer.server.openapi_responses import OPENAI_ERRORS
from hinfer.server.prompt import check_token_ids, render_prompt_off_loop
from hinfer.server.schemas_openai import ChatCompletionRequest
from hinfer.server.schemas_tokenize import DetokenizeRequest, TokenizeRequest
from hinfer.server.state import ServerState, get_state
from hinfer.server.tokenizer_info import tokenizer_info

router = APIRouter(responses=OPENAI_ERRORS)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request):
    st = get_state(request)
    if body.model is not None:  # optional, as in vLLM
        st.check_model(body.model)
    if (body.prompt is None) == (body.messages is None):
        raise bad_request("give either 'prompt' (raw text) or 'messages' (a chat)", param="prompt")
    if body.prompt is not None:
        add_special = body.add_special_tokens is not False
        ids = await asyncio.to_thread(st.tokenizer.encode, body.prompt, add_special)  # off the loop, as chat's
    else:
        ids = await _chat_ids(st, body)
    # the answer of a long prompt is megabytes of JSON: written off the loop, as the encoding
    return await asyncio.to_thread(_tokenize_answer, st, ids, bool(body.return_token_strs))


def _tokenize_answer(st: ServerState, ids: list[int], token_strs: bool) -> JSONResponse:
    strs = [st.tokenizer.id_to_token(i) or "" for i in ids] if token_strs else None
    return JSONResponse({"count": len(ids), "max_model_len": st.engine.max_context, "tokens": ids,
                         "token_strs": strs})  # fmt: skip


async def _chat_ids(st: ServerState, body: TokenizeRequest) -> list[int]:
    """The prompt a chat completion with these messages would have (same conversion, template and guard)."""
    if body.chat_template is not None:
        raise bad_request("chat_template is not accepted: the server renders with the checkpoint's template",
                          param="chat_template")
    if body.continue_final_message and body.add_generation_prompt:
        raise bad_request("continue_final_message and add_generation_prompt cannot both be true",
                          param="continue_final_message")
    if not body.messages:
        raise bad_request("messages must hold at least one message", param="messages")
    chat = ChatCompletionRequest.model_construct(model=st.model_name, messages=body.messages, tools=body.tools,
                                                 chat_template_kwargs=body.chat_template_kwargs,
                                                 continue_final_message=body.continue_final_message)
    prompt, _ = chat_prompt(chat, st.preserve_thinking_default)
    if not body.continue_final_message:  # a continuation goes on after the generation prompt
        prompt.add_generation_prompt = body.add_generation_prompt
    ids = await render_prompt_off_loop(st.tokenizer, prompt, st.prompt_guard)
    ids, _ = await with_images(st, prompt, ids)  # each image's tokens counted, as in the chat's usage
    if body.add_special_tokens:
        ids = st.tokenizer.encode("", add_special_tokens=True) + ids  # a BOS, for tokenizers that add one
    return ids


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request):
    st = get_state(request)
    if body.model is not None:
        st.check_model(body.model)
    check_token_ids(body.tokens, st.tokenizer.vocab_size, "tokens")
    text = await asyncio.to_thread(st.tokenizer.decode, body.tokens, False)  # special tokens kept, as vLLM
    return {"prompt": text}


@router.get("/tokenizer_info")
async def get_tokenizer_info(request: Request):
    return tokenizer_info(get_state(request).tokenizer)
