"""OpenAI Responses requests -> ChatPrompt and SamplingParams (the per-field decisions of docs/api.md).

`input` items become the chat messages the Qwen3.5 template reads: an assistant turn gathers the reasoning,
message and function_call / custom_tool_call items that follow each other; their outputs become tool messages;
system/developer items before the first turn join `instructions`, later ones stay in place (late_system.py).
User messages' `input_image` parts (data URLs) become the template's image items, their images decoded in order.

Custom (freeform) tools, such as Codex CLI's `apply_patch` in its grammar form, take plain text rather than JSON
arguments: the model sees each as a function of one string parameter, CUSTOM_INPUT, whose description carries the
tool's grammar (Qwen3.5's tool calls write parameter values as raw text, so a patch goes through unescaped), and a
call comes back as a `custom_tool_call` item with that text as its `input` (responses_stream.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from hinfer.sampling_params import SamplingParams
from hinfer.server.errors import bad_request
from hinfer.server.images import image_from_url
from hinfer.server.openai_convert import REASONING_EFFORT_BUDGET
from hinfer.server.prompt import ChatPrompt, ToolChoice, check_tool_choice

log = logging.getLogger(__name__)

_MEDIA_PARTS = {"input_image", "input_file", "input_audio", "image_url", "image", "file"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}
_ENCRYPTED_PREFIX = "hinfer-reasoning:"  # our opaque reasoning: base64 of the text, readable only by us
_warned_tool_types: set[str] = set()
CUSTOM_INPUT = "input"  # the one parameter a custom tool is shown with


def encrypt_reasoning(text: str) -> str:
    return _ENCRYPTED_PREFIX + base64.b64encode(text.encode()).decode()


def decrypt_reasoning(blob: Any) -> str | None:
    """Our own `encrypted_content` -> the reasoning text; anything else (another server's) -> None."""
    if not isinstance(blob, str) or not blob.startswith(_ENCRYPTED_PREFIX):
        return None
    try:
        return base64.b64decode(blob[len(_ENCRYPTED_PREFIX):], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def input_items(raw: str | list[Any]) -> list[Any]:
    """`input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}] if raw else []
    return list(raw)


def _part_text(part: Any, param: str, media_placeholder: bool) -> str:
    if not isinstance(part, dict):
        raise bad_request("a content part must be an object", param=param)
    typ = part.get("type")
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
    return [_image_part(p, f"{param}.{i}", images) if p.get("type") == "input_image"
            else {"type": "text", "text": _part_text(p, f"{param}.{i}", False)} for i, p in enumerate(content)]


def reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its reasoning_text content, else our encrypted_content, else its summary."""
    parts = item.get("content")
    if isinstance(parts, list):
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "\n\n".join(texts)
    text = decrypt_reasoning(item.get("encrypted_content"))
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


def _str_field(item: dict[str, Any], key: str, param: str) -> str:
    v = item.get(key)
    if not isinstance(v, str) or not v:
        raise bad_request(f"{key} must be a non-empty string", param=f"{param}.{key}")
    return v


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


def convert_items(items: list[Any], instructions: str | None, images: list[Any] | None = None
                  ) -> list[dict[str, Any]]:  # fmt: skip
    """-> the template's messages; user messages' images (decoded, in order) are appended to `images`."""
    images = [] if images is None else images
    t = _Turns()
    if instructions:
        t.system(instructions)
    for i, item in enumerate(items):
        p = f"input.{i}"
        if not isinstance(item, dict):
            raise bad_request("every input item must be an object", param=p)
        typ = item.get("type") or ("message" if "role" in item else None)
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
                    "function": {"name": _str_field(item, "name", p),
                                 "arguments": _arguments(item.get("arguments"), f"{p}.arguments")}}
            t.assistant().setdefault("tool_calls", []).append(call)
        elif typ == "custom_tool_call":
            text = item.get("input")
            if not isinstance(text, str):
                raise bad_request("a custom_tool_call's input must be a string", param=f"{p}.input")
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": _str_field(item, "name", p), "arguments": {CUSTOM_INPUT: text}}}
            t.assistant().setdefault("tool_calls", []).append(call)
        elif typ in ("function_call_output", "custom_tool_call_output"):
            t.add({"role": "tool", "tool_call_id": item.get("call_id"),
                   "content": _content_text(item.get("output"), f"{p}.output", media_placeholder=True)})
        elif typ == "item_reference":
            raise bad_request("item_reference input items are not supported: send the item itself, or use "
                              "previous_response_id", param=f"{p}.type")
        else:
            raise bad_request(f"unsupported input item type {typ!r}; supported: message, reasoning, function_call, "
                              "function_call_output, custom_tool_call, custom_tool_call_output", param=f"{p}.type")
    return t.messages


def custom_tool_names(tools: list[Any] | None) -> frozenset[str]:
    """The names of a request's custom (freeform) tools."""
    return frozenset(t["name"] for t in tools or [] if isinstance(t, dict) and t.get("type") == "custom"
                     and isinstance(t.get("name"), str))  # fmt: skip


def custom_tool_grammars(tools: list[Any] | None) -> dict[str, dict[str, str]] | None:
    """{name: {"parameter", "syntax", "definition"}} of the custom tools with a grammar format, for the tool-call
    grammar (StructuredOutput.tool_grammars); None without any."""
    out = {t["name"]: {"parameter": CUSTOM_INPUT, "syntax": t["format"].get("syntax") or "lark",
                       "definition": t["format"]["definition"]}
           for t in tools or [] if isinstance(t, dict) and t.get("type") == "custom"
           and isinstance(t.get("format"), dict) and t["format"].get("type") == "grammar"}  # fmt: skip
    return out or None


def custom_input(arguments: str) -> str:
    """A custom tool call's text from the arguments the tool parser wrote ({CUSTOM_INPUT: text} as JSON); a call
    that came out otherwise keeps its raw arguments."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(args, dict) and isinstance(args.get(CUSTOM_INPUT), str):
        return args[CUSTOM_INPUT]
    return arguments


def _custom_tool(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """A custom tool as the chat tool the model sees: one string parameter, the grammar (if any) in its text."""
    name = _str_field(tool, "name", param)
    fmt = tool.get("format") or {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise bad_request("a custom tool's format must be {'type': 'text'} or {'type': 'grammar', 'syntax', "
                          "'definition'}", param=f"{param}.format")  # fmt: skip
    about = "The tool's whole input, as plain text (not JSON)."
    if fmt["type"] == "grammar":
        if not isinstance(fmt.get("definition"), str):
            raise bad_request("a grammar format needs its definition as a string", param=f"{param}.format.definition")
        if fmt.get("syntax", "lark") not in ("lark", "regex"):
            raise bad_request("a grammar format's syntax must be 'lark' or 'regex'", param=f"{param}.format.syntax")
        about += f" It must follow this {fmt.get('syntax') or 'lark'} grammar:\n{fmt['definition']}"
    fn: dict[str, Any] = {"name": name, "parameters": {
        "type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": about}},
        "required": [CUSTOM_INPUT]}}  # fmt: skip
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def convert_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Flat Responses function tools and custom (freeform) tools -> chat tools. Other tool types (web_search,
    file_search, mcp, ...) run at OpenAI, not here: they are left out, with a warning logged once per type."""
    out = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise bad_request("every tool must be an object", param=f"tools.{i}")
        typ = tool.get("type")
        if typ == "custom":
            out.append(_custom_tool(tool, f"tools.{i}"))
            continue
        if typ != "function":
            if typ not in _warned_tool_types and len(_warned_tool_types) < 64:  # bounded: types come from clients
                _warned_tool_types.add(str(typ))
                log.warning("ignoring Responses tools of type %r: only function tools are supported", typ)
            continue
        name = _str_field(tool, "name", f"tools.{i}")
        params = tool.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise bad_request("parameters must be a JSON schema object", param=f"tools.{i}.parameters")
        fn: dict[str, Any] = {"name": name, "parameters": params}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def convert_tool_choice(raw: str | dict[str, Any] | None, parallel: bool | None) -> ToolChoice:
    if raw is None or raw == "auto":
        choice = ToolChoice("auto")
    elif raw in ("none", "required"):
        choice = ToolChoice(str(raw))
    elif isinstance(raw, dict) and raw.get("type") in ("function", "custom"):
        if not isinstance(raw.get("name"), str):
            raise bad_request(f"tool_choice of type {raw['type']!r} needs a name", param="tool_choice.name")
        choice = ToolChoice("named", raw["name"])
    elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
        log.warning("tool_choice of type %r is not supported; using auto", raw["type"])
        choice = ToolChoice("auto")
    else:
        raise bad_request("tool_choice must be 'auto', 'none', 'required' or {'type': 'function' | 'custom', "
                          "'name': ...}", param="tool_choice")
    choice.parallel = parallel is not False
    return choice


def chat_prompt(body: Any, items: list[dict[str, Any]], preserve_default: bool) -> tuple[ChatPrompt, int | None]:
    """-> (prompt, thinking budget). `items`: the whole conversation (earlier turns included)."""
    effort = body.reasoning.effort if body.reasoning is not None else None
    enable_thinking = effort != "none"
    budget = REASONING_EFFORT_BUDGET[effort] if effort not in (None, "none") else None
    images: list[Any] = []
    prompt = ChatPrompt(messages=convert_items(items, body.instructions, images), tools=convert_tools(body.tools),
                        tool_choice=convert_tool_choice(body.tool_choice, body.parallel_tool_calls),
                        enable_thinking=enable_thinking, preserve_thinking=preserve_default, late_system=True,
                        images=images, tool_grammars=custom_tool_grammars(body.tools))  # fmt: skip
    check_tool_choice(prompt, "tool_choice")
    return prompt, budget


def sampling_params(body: Any, max_tokens: int) -> SamplingParams:
    sp = SamplingParams(max_tokens=max_tokens)
    if body.temperature is not None:
        sp.temperature = body.temperature
    if body.top_p is not None:
        sp.top_p = body.top_p
    try:
        sp.validate()
    except ValueError as e:
        raise bad_request(str(e), param=getattr(e, "param", None)) from e
    return sp
