"""OpenAI requests -> ChatPrompt and SamplingParams (all the per-field decisions of docs/api.md live here)."""

from __future__ import annotations

import json
from typing import Any

from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults
from hinfer.sampling_params import SamplingParams
from hinfer.server.errors import bad_request
from hinfer.server.images import image_from_url
from hinfer.server.prompt import (
    ChatPrompt,
    ToolChoice,
    check_token_ids,
    check_tool_choice,
    normalize_seed,
    stop_list,
)
from hinfer.server.responses_tools import CUSTOM_INPUT, convert_tools, tool_names
from hinfer.server.schemas_openai import (
    AllowedToolsChoice,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    _SamplingFields,
)

# reasoning_effort -> thinking budget in tokens (None: unbounded). "none" turns thinking off.
REASONING_EFFORT_BUDGET: dict[str, int | None] = {
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": None,
}

_MEDIA_PARTS = {"image_url", "image", "input_image", "input_audio", "audio", "file", "video", "video_url"}


def content_parts(content: str | list[dict[str, Any]] | None, param: str, images: list[Any]) -> str | list:
    """User message content -> one string, or with images the template's items ({"type": "text"} and
    {"type": "image"} in order); the decoded images are appended to `images`."""
    if not isinstance(content, list) or not any(p.get("type") == "image_url" for p in content):
        return content_text(content, param)
    items: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        if part.get("type") == "image_url":
            url = part.get("image_url")
            images.append(image_from_url(url.get("url") if isinstance(url, dict) else url, f"{param}.{i}.image_url"))
            items.append({"type": "image"})
        else:
            items.append({"type": "text", "text": content_text([part], f"{param}.{i}")})
    return items


def content_text(content: str | list[dict[str, Any]] | None, param: str) -> str:
    """Message content -> one string. Text parts are concatenated as the template would; media is a 400."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content):
        typ = part.get("type")
        if typ is not None and not isinstance(typ, str):
            raise bad_request("a content part's 'type' must be a string", param=f"{param}.{i}.type")
        if typ == "image_url":
            raise bad_request("images are taken in user messages only", param=f"{param}.{i}")
        if typ in _MEDIA_PARTS or "image_url" in part:
            raise bad_request(f"{typ!r} content parts are not supported (images: 'image_url' with a data URL)",
                              param=f"{param}.{i}")
        if typ not in ("text", "input_text", None) or not isinstance(part.get("text"), str):
            raise bad_request(f"unsupported content part {typ!r}; expected {{'type': 'text', 'text': ...}}",
                              param=f"{param}.{i}")
        texts.append(part["text"])
    return "".join(texts)


def _tool_call_dict(tc: Any, param: str) -> dict[str, Any]:
    if tc.type == "custom":  # a freeform tool's call: rendered as the call the model wrote (its one parameter)
        if tc.custom is None:
            raise bad_request("a custom tool call needs its 'custom': {'name', 'input'}", param=param)
        return {"id": tc.id, "type": "function", "function": {"name": tc.custom.name,
                                                              "arguments": {CUSTOM_INPUT: tc.custom.input}}}
    if tc.function is None:
        raise bad_request("a function tool call needs its 'function': {'name', 'arguments'}", param=param)
    args = tc.function.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as e:
            raise bad_request(f"tool call arguments are not valid JSON: {e}", param=param) from e
    if not isinstance(args, dict):
        raise bad_request("tool call arguments must be a JSON object", param=param)
    return {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": args}}


def convert_messages(messages: list[ChatMessage], images: list[Any] | None = None) -> list[dict[str, Any]]:
    """-> the template's messages; user messages' images (decoded, in order) are appended to `images`."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        p = f"messages.{i}"
        role = "system" if m.role == "developer" else m.role
        if role == "user" and images is not None:
            text = content_parts(m.content, f"{p}.content", images)
        else:
            text = content_text(m.content, f"{p}.content")
        if role == "system" and out and out[-1]["role"] == "system" and len(out) == 1:
            out[-1]["content"] += "\n\n" + text  # leading system + developer messages become one
            continue
        msg: dict[str, Any] = {"role": role, "content": text}
        if role == "assistant":
            reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
            if reasoning is not None:
                msg["reasoning_content"] = reasoning
            if m.tool_calls:
                msg["tool_calls"] = [_tool_call_dict(tc, f"{p}.tool_calls.{j}") for j, tc in enumerate(m.tool_calls)]
        if role == "tool" and m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def chat_prompt(body: ChatCompletionRequest, preserve_default: bool) -> tuple[ChatPrompt, int | None]:
    """-> (prompt, thinking budget)."""
    kwargs = dict(body.chat_template_kwargs or {})
    enable_thinking = kwargs.pop("enable_thinking", True)
    preserve = kwargs.pop("preserve_thinking", preserve_default)
    if not isinstance(enable_thinking, bool) or not isinstance(preserve, bool):
        raise bad_request("chat_template_kwargs.enable_thinking and preserve_thinking must be booleans",
                          param="chat_template_kwargs")
    budget = None
    if body.reasoning_effort == "none":
        enable_thinking = False
    elif body.reasoning_effort is not None:
        budget = REASONING_EFFORT_BUDGET[body.reasoning_effort]
    tools, custom = _chat_tools(body.tools or [])
    tc = body.tool_choice
    if tc is None:
        choice = ToolChoice("auto")
    elif isinstance(tc, str):
        choice = ToolChoice(tc)
    elif isinstance(tc, AllowedToolsChoice):
        choice = ToolChoice(tc.allowed_tools.mode, allowed=_allowed_names(tc.allowed_tools.tools))
    else:
        named = tc.custom if tc.type == "custom" else tc.function
        if named is None:
            raise bad_request(f"tool_choice of type {tc.type!r} needs its {tc.type!r}: {{'name': ...}}",
                              param=f"tool_choice.{tc.type}")
        choice = ToolChoice("named", named.name)
    choice.parallel = body.parallel_tool_calls is not False
    images: list[Any] = []
    messages = convert_messages(body.messages, images)
    continuation = _continuation(body, messages, enable_thinking)
    names = tool_names(custom)
    prompt = ChatPrompt(messages=messages, tools=tools, tool_choice=choice, enable_thinking=enable_thinking,
                        preserve_thinking=preserve, template_kwargs=kwargs, images=images, continuation=continuation,
                        tool_grammars=names.grammars, custom_tools=names.custom)
    check_tool_choice(prompt, "tool_choice")
    return prompt, (budget if prompt.starts_in_reasoning() else None)


def _chat_tools(tools: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """-> (the chat tools the template shows, the custom ones in the Responses shape). A custom (freeform) tool is
    shown as a function of one string parameter, as the Responses API's (responses_tools.py); its grammar format
    `{"type": "grammar", "grammar": {"syntax", "definition"}}` is the Responses one nested."""
    out, custom = [], []
    for i, t in enumerate(tools):
        if t.type == "function":
            if t.function is None:
                raise bad_request("a function tool needs its 'function': {'name', 'parameters'}", param=f"tools.{i}")
            out.append({"type": "function", "function": t.function.model_dump(exclude_none=True)})
            continue
        if t.custom is None:
            raise bad_request("a custom tool needs its 'custom': {'name', 'format'}", param=f"tools.{i}")
        fmt = t.custom.format
        if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("grammar"), dict):
            fmt = {"type": "grammar", **fmt["grammar"]}
        shaped = {"type": "custom", "name": t.custom.name, "description": t.custom.description, "format": fmt}
        custom.append({k: v for k, v in shaped.items() if v is not None})
        out.extend(convert_tools([custom[-1]], where=f"tools.{i}.custom"))
    return out, custom


def _allowed_names(tools: list[dict[str, Any]]) -> tuple[str, ...]:
    """allowed_tools' tools ({"type": "function", "function": {"name"}}, or custom alike) -> their names."""
    names = []
    for i, t in enumerate(tools):
        fn = t.get(t["type"]) if t.get("type") in ("function", "custom") else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request("allowed_tools lists function or custom tools: {'type': 'function', 'function': "
                              "{'name': ...}}", param=f"tool_choice.allowed_tools.tools.{i}")  # fmt: skip
        names.append(fn["name"])
    if not names:
        raise bad_request("allowed_tools needs at least one tool", param="tool_choice.allowed_tools.tools")
    return tuple(names)


def _continuation(body: ChatCompletionRequest, messages: list[dict[str, Any]], thinking: bool) -> str:
    """continue_final_message (vLLM's extension): the final assistant message comes off the messages and the
    answer goes on from it, right after the generation prompt, as the template would have written the message
    (thinking on: its reasoning, then `</think>` and its content when it has content, else the reasoning is
    continued). add_generation_prompt: false is taken with it only (vLLM asks for both)."""
    explicit = "add_generation_prompt" in body.model_fields_set
    if not body.continue_final_message:
        if explicit and not body.add_generation_prompt:
            raise bad_request("add_generation_prompt: false is taken only with continue_final_message: true",
                              param="add_generation_prompt")
        return ""
    if explicit and body.add_generation_prompt:
        raise bad_request("continue_final_message and add_generation_prompt cannot both be true",
                          param="continue_final_message")
    if messages[-1]["role"] != "assistant":
        raise bad_request("continue_final_message needs a final assistant message", param="messages")
    last = messages.pop()
    param = f"messages.{len(messages)}"
    if last.get("tool_calls"):
        raise bad_request("a continued final message may not hold tool calls", param=f"{param}.tool_calls")
    content, reasoning = last["content"], last.get("reasoning_content")
    if reasoning is None and "</think>" in content:  # thinking written inline, split as the template splits it
        reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
        content = content.split("</think>")[-1].lstrip("\n")
    reasoning = (reasoning or "").strip()
    if not thinking:
        if reasoning:
            raise bad_request("a continued final message with reasoning needs thinking on",
                              param=f"{param}.reasoning_content")
        return content
    return reasoning + "\n</think>\n\n" + content if content else reasoning


def sampling_params(body: _SamplingFields, *, max_tokens: int, vocab_size: int, logprobs: int | None,
                    skip_special_tokens: bool, defaults: SamplingDefaults = NEUTRAL) -> SamplingParams:
    """The request's sampling fields over `defaults` (the served model's, for the fields it leaves out)."""
    bias: dict[int, float] = {}
    for k, v in (body.logit_bias or {}).items():
        try:
            tid = int(k)
        except ValueError:
            raise bad_request(f"logit_bias key {k!r} is not a token id", param="logit_bias") from None
        if not -100 <= v <= 100:
            raise bad_request("logit_bias values must be in [-100, 100]", param="logit_bias")
        bias[tid] = v
    check_token_ids(list(bias), vocab_size, "logit_bias")
    check_token_ids(body.stop_token_ids or [], vocab_size, "stop_token_ids")
    sp = defaults.params(
        max_tokens=max_tokens,
        stop=stop_list(body.stop),
        stop_token_ids=list(body.stop_token_ids or []),
        ignore_eos=body.ignore_eos,
        logit_bias=bias,
        seed=normalize_seed(body.seed),
        logprobs=logprobs,
        skip_special_tokens=skip_special_tokens,
    )
    for name in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty"):
        v = getattr(body, name)
        if v is not None:
            setattr(sp, name, v)
    if sp.top_k >= vocab_size:
        sp.top_k = 0  # keeping every token is no top-k at all (and keeps huge values out of int64 tensors)
    try:
        sp.validate()
    except ValueError as e:
        raise bad_request(str(e), param=getattr(e, "param", None)) from e
    return sp


def chat_logprobs(body: ChatCompletionRequest) -> int | None:
    if not body.logprobs:
        return None
    n = body.top_logprobs or 0
    if not 0 <= n <= 20:
        raise bad_request("top_logprobs must be in [0, 20]", param="top_logprobs")
    return n


def chat_prompt_logprobs(body: ChatCompletionRequest) -> int | None:
    """vLLM's extension: every prompt token's logprob given the tokens before it (the engine then computes each
    prompt position's logits and takes no cached prefix); the answer's `prompt_logprobs`, not streamed."""
    n = body.prompt_logprobs
    if n is None:
        return None
    if not 0 <= n <= 20:
        raise bad_request("prompt_logprobs must be in [0, 20]", param="prompt_logprobs")
    if body.stream:
        raise bad_request("prompt_logprobs are not available with stream: true", param="prompt_logprobs")
    return n


FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def _fim_ids(body: CompletionRequest, tokenizer: Any) -> tuple[int, int, int]:
    """suffix (fill-in-the-middle): the tokenizer's FIM token ids, prompt laid out prefix-suffix-middle as Qwen's
    coders are trained (`<|fim_prefix|>` prompt `<|fim_suffix|>` suffix `<|fim_middle|>`)."""
    if body.echo:
        raise bad_request("echo cannot be combined with suffix", param="suffix")
    ids = tuple(tokenizer.token_to_id(t) for t in FIM_TOKENS)
    if any(i is None for i in ids):
        raise bad_request("this model's tokenizer has no fill-in-the-middle tokens", param="suffix")
    return ids  # type: ignore[return-value]


def completion_prompts(body: CompletionRequest, tokenizer: Any) -> list[tuple[list[int], str]]:
    """-> per prompt: (token ids, its text for echo). A string, a list of strings, a list of token ids, or a list
    of lists of token ids; with `suffix`, text prompts laid out for fill-in-the-middle (_fim_ids)."""
    if body.best_of is not None and body.best_of != (body.n or 1):
        raise bad_request("best_of must equal n: every sample is returned", param="best_of")
    fim = _fim_ids(body, tokenizer) if body.suffix else None
    p = body.prompt
    items: list[str | list[int]] = list(p) if isinstance(p, list) and p and isinstance(p[0], (str, list)) else [p]
    out = []
    for k, item in enumerate(items):
        param = "prompt" if len(items) == 1 else f"prompt.{k}"
        if isinstance(item, str):
            if not item and fim is None:
                raise bad_request("prompt is empty", param=param)
            ids = tokenizer.encode(item, add_special_tokens=False)
            if fim is not None:  # the model writes the middle between the prompt and the suffix
                pre, suf, mid = fim
                ids = [pre, *ids, suf, *tokenizer.encode(body.suffix, add_special_tokens=False), mid]
            out.append((ids, item))
            continue
        if fim is not None:
            raise bad_request("suffix (fill-in-the-middle) takes text prompts", param="suffix")
        ids = [int(t) for t in item]
        if not ids:
            raise bad_request("prompt is empty", param=param)
        check_token_ids(ids, tokenizer.vocab_size, param)
        out.append((ids, tokenizer.decode(ids, skip_special_tokens=False)))
    return out
