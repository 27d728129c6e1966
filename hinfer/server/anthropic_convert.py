"""Anthropic Messages requests -> ChatPrompt and SamplingParams (decisions documented in docs/api.md)."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults
from hinfer.sampling_params import SamplingParams
from hinfer.server.errors import bad_request, describe_validation_errors
from hinfer.server.images import image_from_base64
from hinfer.server.prompt import ChatPrompt, ToolChoice, check_tool_choice, loaded_text, stop_list
from hinfer.server.schemas_anthropic import (
    BLOCK_TYPES,
    MessagesRequest,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    _MessagesBase,
    is_server_tool_block,
)

log = logging.getLogger(__name__)

_MEDIA_BLOCKS = {"audio", "video", "file", "container_upload"}


def _image(raw: dict[str, Any], param: str) -> Any:
    """An image block's source: base64 data only (url sources are not fetched)."""
    src = raw.get("source")
    if not isinstance(src, dict):
        raise bad_request("an image block needs a 'source' object", param=f"{param}.source")
    if src.get("type") == "url":
        raise bad_request("image URLs are not fetched (this server may have no network); send the image as a "
                          "base64 source", param=f"{param}.source")  # fmt: skip
    if src.get("type") != "base64":
        raise bad_request("image source type must be 'base64'", param=f"{param}.source.type")
    return image_from_base64(src.get("data"), src.get("media_type"), f"{param}.source")


def _document_text(raw: dict[str, Any], param: str) -> str:
    """A text document (`source` of type `text`, or `content`: a string or text blocks) as the text the model reads:
    its title, its context, then the text, a blank line apart. PDFs and other files are not read here."""
    src = raw.get("source")
    typ = src.get("type") if isinstance(src, dict) else None
    if typ == "text" and isinstance(src.get("data"), str):
        text = src["data"]
    elif typ == "content" and isinstance(src.get("content"), str):
        text = src["content"]
    elif typ == "content" and isinstance(src.get("content"), list):
        text = "\n\n".join(_block_text(b, f"{param}.source.content.{i}", False) for i, b in enumerate(src["content"]))
    else:
        raise bad_request("only text documents are read (source {'type': 'text', 'data'} or {'type': 'content', "
                          "'content'}); PDFs, URLs and files are not", param=f"{param}.source")  # fmt: skip
    head = [f"Document: {raw['title']}" if isinstance(raw.get("title"), str) and raw["title"] else "",
            raw["context"] if isinstance(raw.get("context"), str) else ""]  # fmt: skip
    return "\n\n".join(p for p in (*head, text) if p)


def _block(raw: dict[str, Any], param: str) -> Any:
    typ = raw.get("type")
    if not isinstance(typ, str):
        raise bad_request("every content block needs a string 'type'", param=f"{param}.type")
    if typ == "document":
        return TextBlock(type="text", text=_document_text(raw, param))
    if typ in _MEDIA_BLOCKS:
        raise bad_request(f"{typ} blocks are not supported (images: 'image' blocks with a base64 source)",
                          param=param)
    if typ == "image":
        return raw  # user messages take them (convert_messages); anywhere else they are refused there
    cls = ServerToolBlock if is_server_tool_block(typ) else BLOCK_TYPES.get(typ)
    if cls is None:
        raise bad_request(f"unsupported content block type {typ!r}", param=f"{param}.type")
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        msg, sub = describe_validation_errors(e.errors())
        raise bad_request(f"{param}: {msg}", param=f"{param}.{sub}" if sub else param) from None


def _block_text(raw: Any, param: str, tool_result: bool) -> str:
    """One block of a system prompt or tool result as text (a text document's text too). In a tool result an image,
    a PDF or other non-text block becomes a one-line placeholder instead of a 400: a tool's output is not the client's to change (Claude
    Code's Read returns a screenshot as an image block), and the turn must go on."""
    typ = raw.get("type") if isinstance(raw, dict) else None
    if tool_result and typ == "document" and isinstance(raw.get("source"), dict) and raw["source"].get("type") in (
            "text", "content"):  # fmt: skip
        return _document_text(raw, param)
    if tool_result and isinstance(typ, str) and typ != "text":
        return f"[{typ} omitted: this server reads images in user messages only, and no PDF or file documents]"
    b = _block(raw, param)
    if isinstance(b, dict):
        raise bad_request("images are taken in user message content only", param=param)
    if not isinstance(b, TextBlock):
        raise bad_request(f"expected text blocks here, got {b.type!r}", param=param)
    return b.text


def _texts(content: str | list[dict[str, Any]] | None, param: str, tool_result: bool = False) -> str:
    """System prompt or tool_result content -> text (_block_text). Blocks are joined by blank lines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n\n".join(_block_text(raw, f"{param}.{i}", tool_result) for i, raw in enumerate(content))


def _with_references(raw: Any, defs: dict[str, dict[str, Any]]) -> Any:
    """A tool result's `tool_reference` blocks (a client's tool search loading deferred tools: Claude Code's
    ToolSearch answers with them) -> one text block at the first one's place, listing the tools they name as the
    system prompt lists its own (loaded_text), as Anthropic expands them into the tools' definitions."""
    if not isinstance(raw, list) or not any(isinstance(r, dict) and r.get("type") == "tool_reference" for r in raw):
        return raw
    out: list[Any] = []
    named: list[dict[str, Any]] = []
    missing: list[str] = []
    at = 0
    for r in raw:
        if not (isinstance(r, dict) and r.get("type") == "tool_reference"):
            out.append(r)
            continue
        if not named and not missing:
            at = len(out)
            out.append(None)  # where the first reference stood: filled below
        name = r.get("tool_name")
        if isinstance(name, str) and name in defs:
            named.append(defs[name])
        else:  # a tool's output is not the client's to change: said in words, not a 400
            missing.append(f"[tool_reference to {name!r}: no tool of that name in this request]")
    out[at] = {"type": "text", "text": "\n".join(([loaded_text(named)] if named else []) + missing)}
    return out


def _tool_result(b: ToolResultBlock, param: str, images: list[Any] | None,
                 defs: dict[str, dict[str, Any]]) -> str | list[dict[str, Any]]:  # fmt: skip
    """A tool result's content for the template: its text, or with `images` (a model that reads them) its text and
    image items in order, the images decoded into `images` as the template will render them; without, an image
    is a placeholder line (_block_text). Texts between images are joined by blank lines, as without images. The
    template has no error flag for tool results: `is_error` says it in words. `tool_reference` blocks list the
    tools they load (`defs`: every tool of the request by name, as the template shows tools)."""
    prefix = "Error: " if b.is_error else ""
    raw = _with_references(b.content, defs)
    if images is None or not isinstance(raw, list) or not any(isinstance(r, dict) and r.get("type") == "image"
                                                              for r in raw):  # fmt: skip
        return prefix + _texts(raw, param, tool_result=True)
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for i, r in enumerate(raw):
        if isinstance(r, dict) and r.get("type") == "image":
            images.append(_image(r, f"{param}.{i}"))
            if texts or prefix:
                items.append({"type": "text", "text": prefix + "\n\n".join(texts)})
                texts, prefix = [], ""
            items.append({"type": "image"})
        else:
            texts.append(_block_text(r, f"{param}.{i}", tool_result=True))
    if texts:
        items.append({"type": "text", "text": prefix + "\n\n".join(texts)})
    return items


def convert_messages(body: _MessagesBase, images: list[Any], tool_images: bool = False,
                     defs: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """System messages inside `messages` before the first turn join the top-level `system`; later ones stay
    where they are (rendered as system turns there, see late_system.py). Images are decoded into `images` in the
    order the template renders them: a message's tool results come before its text (and its own images).
    `tool_images`: the model reads images, so those inside tool results are passed on rather than replaced.
    `defs`: the request's tools by name, for the tool_reference blocks of tool results."""
    defs = {} if defs is None else defs
    out: list[dict[str, Any]] = []
    system = _texts(body.system, "system")
    if system:
        out.append({"role": "system", "content": system})
    for i, m in enumerate(body.messages):
        p = f"messages.{i}.content"
        if m.role == "system":
            text = _texts(m.content, p)
            if not text:
                continue
            if out and all(o["role"] == "system" for o in out):
                out[0]["content"] += "\n\n" + text
            else:
                out.append({"role": "system", "content": text})
            continue
        blocks = [TextBlock(type="text", text=m.content)] if isinstance(m.content, str) else [
            _block(raw, f"{p}.{j}") for j, raw in enumerate(m.content)]
        if m.role == "user":
            texts: list[str] = []
            items: list[dict[str, Any]] = []  # with images: the template's text and image items, in order
            own: list[Any] = []  # the message's images: rendered after its tool results
            for j, b in enumerate(blocks):
                if isinstance(b, dict):  # an image block
                    own.append(_image(b, f"{p}.{j}"))
                    if texts:
                        items.append({"type": "text", "text": "\n\n".join(texts)})
                        texts = []
                    items.append({"type": "image"})
                    continue
                if isinstance(b, ToolResultBlock):
                    out.append({"role": "tool", "tool_call_id": b.tool_use_id,
                                "content": _tool_result(b, f"{p}.{j}.content", images if tool_images else None,
                                                        defs)})
                elif isinstance(b, TextBlock):
                    texts.append(b.text)
                else:
                    raise bad_request(f"a user message cannot hold {b.type!r} blocks", param=f"{p}.{j}")
            images.extend(own)
            if items:
                if texts:
                    items.append({"type": "text", "text": "\n\n".join(texts)})
                out.append({"role": "user", "content": items})
            elif texts or not any(isinstance(b, ToolResultBlock) for b in blocks):
                out.append({"role": "user", "content": "\n\n".join(texts)})
        else:
            texts, thinking, calls = [], [], []
            for j, b in enumerate(blocks):
                if isinstance(b, TextBlock):
                    texts.append(b.text)
                elif isinstance(b, ThinkingBlock):
                    thinking.append(b.thinking)
                elif isinstance(b, ToolUseBlock):
                    calls.append({"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.input}})
                elif isinstance(b, ToolResultBlock):
                    raise bad_request("tool_result blocks belong in user messages", param=f"{p}.{j}")
                elif isinstance(b, dict):
                    raise bad_request("images are taken in user messages only", param=f"{p}.{j}")
                elif isinstance(b, ServerToolBlock):
                    _skip_server_tool(b.type)
                # redacted_thinking: opaque to us, dropped
            msg: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts)}
            if thinking:
                msg["reasoning_content"] = "\n\n".join(thinking)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    return out


# Deferred tools (`defer_loading: true`) are callable but not shown in the system prompt: the client loads them by a
# search of its own whose result carries `tool_reference` blocks (Claude Code's ToolSearch, through a custom base
# URL), listed where they stand (_with_references), so the system prompt, and with it the prefix cache, stays as it
# was when tools load mid-conversation. Anthropic's server-side tool search tools (tool_search_tool_regex_...,
# _bm25_...) have no counterpart here: with one in the request the deferred tools are shown like the others, so
# there is nothing left to search for, and the search tool is left out. With every tool deferred they are all shown
# too: the call format comes with the system prompt's tool list, and with none shown nothing would teach it.
TOOL_SEARCH_PREFIX = "tool_search_tool_"
_skipped_search_types: set[str] = set()


def _skip_server_tool(typ: str) -> None:
    """A server tool's call or result in the history (a conversation begun at Anthropic): that tool ran there and
    its results are Anthropic's (encrypted, or nothing this server can render faithfully); the text Claude wrote
    from them stays. Left out of the prompt, logged once per type."""
    if typ not in _skipped_server_blocks and len(_skipped_server_blocks) < 16:  # bounded: types come from clients
        _skipped_server_blocks.add(typ)
        log.info("%r blocks left out of the prompt: server tools run at Anthropic, not here", typ)


_skipped_server_blocks: set[str] = set()


def _skip_tool_search(typ: str) -> None:
    if typ not in _skipped_search_types and len(_skipped_search_types) < 16:  # bounded: types come from clients
        _skipped_search_types.add(typ)
        log.info("tool search tool %r left out: every tool given is shown to the model, deferred ones too", typ)


def chat_prompt(body: _MessagesBase, preserve_default: bool, tool_images: bool = False
                ) -> tuple[ChatPrompt, int | None]:  # fmt: skip
    """-> (prompt, thinking budget). No `thinking` (or disabled) renders the prompt with thinking off, the
    way Anthropic models answer by default; enabled sets the budget, adaptive thinks without one.
    `tool_images`: the model reads images (convert_messages)."""
    tools, deferred, defs = [], [], {}
    server_search = any(t.type is not None and t.type.startswith(TOOL_SEARCH_PREFIX) for t in body.tools or [])
    for i, t in enumerate(body.tools or []):
        if t.type is not None and t.type.startswith(TOOL_SEARCH_PREFIX):
            _skip_tool_search(t.type)
            continue
        if t.type not in (None, "custom") or t.input_schema is None:
            raise bad_request(f"tool {t.name!r}: only custom tools with an input_schema are supported "
                              "(server tools run at Anthropic, not here)", param=f"tools.{i}")
        fn: dict[str, Any] = {"name": t.name, "parameters": t.input_schema}
        if t.description is not None:
            fn["description"] = t.description
        defs[t.name] = {"type": "function", "function": fn}
        (deferred if t.defer_loading and not server_search else tools).append(defs[t.name])
    if deferred and not tools:
        tools, deferred = deferred, []
    tc = body.tool_choice
    if tc is None or tc.type == "auto":
        choice = ToolChoice("auto")
    elif tc.type == "any":
        choice = ToolChoice("required")
    elif tc.type == "none":
        choice = ToolChoice("none")
    else:
        if not tc.name:
            raise bad_request("tool_choice of type 'tool' needs a name", param="tool_choice.name")
        choice = ToolChoice("named", tc.name)
    if tc is not None and tc.disable_parallel_tool_use:
        choice.parallel = False
    thinking = body.thinking
    enabled = thinking is not None and thinking.type in ("enabled", "adaptive")
    budget = None
    if thinking is not None and thinking.type == "enabled":
        if thinking.budget_tokens is None or thinking.budget_tokens < 1:
            raise bad_request("thinking.budget_tokens must be a positive integer", param="thinking.budget_tokens")
        budget = thinking.budget_tokens
    images: list[Any] = []
    messages = convert_messages(body, images, tool_images, defs)
    prefill = _prefill(messages, enabled)
    prompt = ChatPrompt(messages=messages, tools=tools, loaded_tools=deferred, tool_choice=choice,
                        enable_thinking=enabled, preserve_thinking=preserve_default, late_system=True, images=images,
                        continuation=prefill)
    check_tool_choice(prompt, "tool_choice")
    return prompt, budget


def _prefill(messages: list[dict[str, Any]], thinking: bool) -> str:
    """A final assistant message is a prefill, as at Anthropic: taken off the messages, its text is where the
    answer goes on from (the response holds only what follows it). Text only, no trailing whitespace, and not
    with thinking on (Anthropic's rules); an empty one asks for a plain answer."""
    if not messages or messages[-1]["role"] != "assistant":
        return ""
    last = messages.pop()
    param = f"messages.{len(messages)}.content"
    if last.get("tool_calls") or last.get("reasoning_content"):
        raise bad_request("a final assistant message (prefill) may hold text only: its tool_use or thinking "
                          "blocks have no answer to continue", param=param)  # fmt: skip
    text = last["content"]
    if text and thinking:
        raise bad_request("a final assistant message (prefill) cannot be continued with thinking enabled",
                          param=param)
    if text != text.rstrip():
        raise bad_request("final assistant content cannot end with trailing whitespace", param=param)
    return text


def sampling_params(body: MessagesRequest, max_tokens: int, vocab_size: int,
                    defaults: SamplingDefaults = NEUTRAL) -> SamplingParams:
    """The request's sampling fields over `defaults` (the served model's, for the fields it leaves out)."""
    sp = defaults.params(max_tokens=max_tokens, stop=stop_list(body.stop_sequences, "stop_sequences"))
    if body.temperature is not None:
        sp.temperature = body.temperature
    if body.top_p is not None:
        sp.top_p = body.top_p
    if body.top_k is not None:
        sp.top_k = 0 if body.top_k >= vocab_size else body.top_k  # all tokens kept: no top-k
    try:
        sp.validate()
    except ValueError as e:
        raise bad_request(str(e), param=getattr(e, "param", None)) from e
    return sp


__all__ = ["MessagesRequest", "chat_prompt", "convert_messages", "sampling_params"]
