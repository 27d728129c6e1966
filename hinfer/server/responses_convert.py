"""OpenAI Responses requests -> ChatPrompt and SamplingParams (the per-field decisions of docs/api.md).

`input` items become the chat messages the Qwen3.5 template reads: an assistant turn gathers the reasoning,
message and function_call / custom_tool_call items that follow each other; their outputs become tool messages;
system/developer items before the first turn join `instructions`, later ones stay in place (late_system.py).
User messages' `input_image` parts (data URLs) become the template's image items, their images decoded in order.
A `tool_search_call` is the assistant's call of TOOL_SEARCH, its `tool_search_output` a tool message listing the
tools found; an `additional_tools` item a system message listing its tools; both kinds of tools are callable from
there on (ChatPrompt.loaded_tools). Tools (function, custom, namespace groups, tool search) and tool_choice:
responses_tools.py.
"""

from __future__ import annotations

import json
from typing import Any

from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults
from hinfer.sampling_params import SamplingParams
from hinfer.server import compaction
from hinfer.server.errors import bad_request
from hinfer.server.images import image_from_url
from hinfer.server.opaque import Opaque
from hinfer.server.openai_convert import REASONING_EFFORT_BUDGET
from hinfer.server.prompt import ChatPrompt, check_tool_choice, loaded_text
from hinfer.server.responses_tools import (
    CUSTOM_INPUT,
    TOOL_SEARCH,
    ToolNames,
    convert_tool_choice,
    convert_tools,
    loaded_tools,
    shown_name,
    tool_names,
)
from hinfer.server.schema_base import type_of

_MEDIA_PARTS = {"input_image", "input_file", "input_audio", "image_url", "image", "file"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}
REASONING = Opaque("hinfer-reasoning:")  # a reasoning item's encrypted_content


def input_items(raw: str | list[Any]) -> list[Any]:
    """`input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}] if raw else []
    return list(raw)


def _part_text(part: Any, param: str, media_placeholder: bool) -> str:
    if not isinstance(part, dict):
        raise bad_request("a content part must be an object", param=param)
    typ = type_of(part, param)
    if typ in _MEDIA_PARTS:
        if media_placeholder:  # a tool's output is not the client's to change: keep the turn, say what is missing
            return f"[{typ} omitted: this server reads images in user messages only, and no files or audio]"
        if typ == "input_image":
            raise bad_request("images are taken in user messages only", param=param)
        raise bad_request(f"{typ!r} content parts are not supported (images: 'input_image' with a data URL)",
                          param=param)  # fmt: skip
    if typ == "refusal" and isinstance(part.get("refusal"), str):
        return part["refusal"]
    if typ not in _TEXT_PARTS or not isinstance(part.get("text"), str):
        raise bad_request(f"unsupported content part {typ!r}; expected {{'type': 'input_text', 'text': ...}}",
                          param=param)
    return part["text"]


def _content_text(content: Any, param: str, media_placeholder: bool = False) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("content must be a string or a list of content parts", param=param)
    return "".join(_part_text(p, f"{param}.{i}", media_placeholder) for i, p in enumerate(content))


def _image_part(part: dict[str, Any], param: str, images: list[Any]) -> dict[str, str]:
    """An input_image part: its image_url (a base64 data URL) decoded into `images`; -> the template's item.
    `detail` is not read: an image always takes the tokens of its preprocessed size."""
    url = part.get("image_url")
    if url is None and part.get("file_id") is not None:
        raise bad_request("input_image file_id is not supported (this server keeps no files); send image_url as a "
                          "data URL: data:image/png;base64,...", param=f"{param}.file_id")  # fmt: skip
    if isinstance(url, dict):  # the chat API's {"url": ...} shape, which some clients send here too
        url = url.get("url")
    images.append(image_from_url(url, f"{param}.image_url", field="image_url"))
    return {"type": "image"}


def _user_content(content: Any, param: str, images: list[Any]) -> str | list[dict[str, str]]:
    """A user message's content: one string, or with images the template's text and image items in order."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "input_image"
                                                for p in content):  # fmt: skip
        return _content_text(content, param)
    return [_image_part(p, f"{param}.{i}", images) if isinstance(p, dict) and p.get("type") == "input_image"
            else {"type": "text", "text": _part_text(p, f"{param}.{i}", False)} for i, p in enumerate(content)]


def reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its reasoning_text content, else our encrypted_content, else its summary."""
    parts = item.get("content")
    if isinstance(parts, list):
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "\n\n".join(texts)
    text = REASONING.decode(item.get("encrypted_content"))
    if text is not None:
        return text
    summary = item.get("summary")
    if isinstance(summary, list):
        return "\n\n".join(s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str))
    return ""


def _arguments(raw: Any, param: str) -> dict[str, Any]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise bad_request(f"function_call arguments are not valid JSON: {e}", param=param) from e
    if not isinstance(raw, dict):
        raise bad_request("function_call arguments must be a JSON object", param=param)
    return raw


class _Turns:
    """Accumulates chat messages; `assistant()` is the open assistant turn, started on demand."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None

    def assistant(self, fresh: bool = False) -> dict[str, Any]:
        if self.turn is None or fresh:
            self.turn = {"role": "assistant", "content": ""}
            self.messages.append(self.turn)
        return self.turn

    def add(self, msg: dict[str, Any]) -> None:
        self.turn = None
        self.messages.append(msg)

    def system(self, text: str) -> None:
        self.turn = None
        if not text:
            return
        if self.messages and all(m["role"] == "system" for m in self.messages):
            self.messages[0]["content"] += "\n\n" + text
        else:
            self.messages.append({"role": "system", "content": text})


def convert_items(items: list[Any], instructions: str | None, images: list[Any] | None = None,
                  loaded: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """-> the template's messages; user messages' images (decoded, in order) are appended to `images`, the chat
    tools that tool_search_output and additional_tools items make callable to `loaded`. The items before a
    server-side compaction item are left out: its summary stands for them (compaction.context_start)."""
    images = [] if images is None else images
    loaded = [] if loaded is None else loaded
    t = _Turns()
    if instructions:
        t.system(instructions)
    start = compaction.context_start(items)
    for i, item in enumerate(items):
        if i < start:
            continue
        p = f"input.{i}"
        if not isinstance(item, dict):
            raise bad_request("every input item must be an object", param=p)
        typ = type_of(item, p) or ("message" if "role" in item else None)
        if typ == "message":
            role = item.get("role")
            if role == "user":
                t.add({"role": "user", "content": _user_content(item.get("content"), f"{p}.content", images)})
                continue
            text = _content_text(item.get("content"), f"{p}.content")
            if role in ("system", "developer"):
                t.system(text)
            elif role == "assistant":
                turn = t.turn
                fresh = turn is None or bool(turn["content"]) or bool(turn.get("tool_calls"))
                t.assistant(fresh)["content"] = text
            else:
                raise bad_request(f"unsupported role {role!r}; expected user, assistant, system or developer",
                                  param=f"{p}.role")
        elif typ == "reasoning":
            turn = t.turn
            fresh = turn is None or bool(turn["content"]) or bool(turn.get("tool_calls"))
            turn = t.assistant(fresh)
            text = reasoning_text(item)
            if text:
                turn["reasoning_content"] = (turn["reasoning_content"] + "\n\n" + text
                                             if turn.get("reasoning_content") else text)
        elif typ == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": shown_name(item, p),
                                 "arguments": _arguments(item.get("arguments"), f"{p}.arguments")}}
            t.assistant().setdefault("tool_calls", []).append(call)
        elif typ == "custom_tool_call":
            text = item.get("input")
            if not isinstance(text, str):
                raise bad_request("a custom_tool_call's input must be a string", param=f"{p}.input")
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": shown_name(item, p), "arguments": {CUSTOM_INPUT: text}}}
            t.assistant().setdefault("tool_calls", []).append(call)
        elif typ == "tool_search_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": TOOL_SEARCH, "arguments": _arguments(item.get("arguments"),
                                                                              f"{p}.arguments")}}  # fmt: skip
            t.assistant().setdefault("tool_calls", []).append(call)
        elif typ in ("function_call_output", "custom_tool_call_output"):
            t.add({"role": "tool", "tool_call_id": item.get("call_id"),
                   "content": _content_text(item.get("output"), f"{p}.output", media_placeholder=True)})
        elif typ in ("tool_search_output", "additional_tools"):
            if not isinstance(item.get("tools"), list):
                raise bad_request(f"a {typ} item's tools must be a list", param=f"{p}.tools")
            found = convert_tools(item["tools"], where=f"{p}.tools")
            loaded.extend(found)
            if typ == "tool_search_output":
                t.add({"role": "tool", "tool_call_id": item.get("call_id"), "content": loaded_text(found)})
            else:
                t.system(loaded_text(found))
        elif typ in compaction.ITEM_TYPES:
            t.add({"role": "user", "content": compaction.replayed_text(item)})
        elif typ == compaction.TRIGGER:
            raise bad_request("a 'compaction_trigger' item is taken only as the last item of a request's input",
                              param=f"{p}.type")
        elif typ == "item_reference":
            raise bad_request("item_reference input items are not supported: send the item itself, or use "
                              "previous_response_id", param=f"{p}.type")
        else:
            raise bad_request(f"unsupported input item type {typ!r}; supported: message, reasoning, function_call, "
                              "function_call_output, custom_tool_call, custom_tool_call_output, tool_search_call, "
                              "tool_search_output, additional_tools, compaction, compaction_trigger (last)",
                              param=f"{p}.type")  # fmt: skip
    return t.messages


def chat_prompt(body: Any, items: list[dict[str, Any]], preserve_default: bool, compacting: bool = False
                ) -> tuple[ChatPrompt, int | None, ToolNames]:  # fmt: skip
    """-> (prompt, thinking budget, how its tool calls go back). `items`: the whole conversation (earlier turns
    included). `compacting`: the prompt asks for the conversation's summary, without thinking or tools."""
    effort = body.reasoning.effort if body.reasoning is not None else None
    if compacting:
        items, effort = compaction.request_items(items), "none"
    enable_thinking = effort != "none"
    budget = REASONING_EFFORT_BUDGET[effort] if effort not in (None, "none") else None
    images: list[Any] = []
    loaded: list[dict[str, Any]] = []
    messages = convert_items(items, body.instructions, images, loaded)
    names = tool_names([*(body.tools or []), *loaded_tools(items)])
    tools = convert_tools(body.tools)  # checked either way
    prompt = ChatPrompt(messages=messages, tools=[] if compacting else tools, loaded_tools=loaded,
                        tool_choice=convert_tool_choice("none" if compacting else body.tool_choice,
                                                        body.parallel_tool_calls),
                        enable_thinking=enable_thinking, preserve_thinking=preserve_default, late_system=True,
                        images=images, tool_grammars=names.grammars)  # fmt: skip
    check_tool_choice(prompt, "tool_choice")
    return prompt, budget, names


def sampling_params(body: Any, max_tokens: int, defaults: SamplingDefaults = NEUTRAL) -> SamplingParams:
    """The request's sampling fields over `defaults` (the served model's, for the fields it leaves out)."""
    sp = defaults.params(max_tokens=max_tokens)
    if body.temperature is not None:
        sp.temperature = body.temperature
    if body.top_p is not None:
        sp.top_p = body.top_p
    try:
        sp.validate()
    except ValueError as e:
        raise bad_request(str(e), param=getattr(e, "param", None)) from e
    return sp
