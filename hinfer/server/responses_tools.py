"""Responses API tools -> the chat tools the Qwen3.5 template shows, and the model's calls back to the items the
client expects. Chat Completions' custom tools go through the same conversion (openai_convert.py).

- `function` tools as they are (the flat Responses shape).
- `custom` (freeform) tools, such as Codex CLI's `apply_patch` in its grammar form, take plain text rather than
  JSON arguments: the model sees each as a function of one string parameter, CUSTOM_INPUT, whose description
  carries the tool's grammar (Qwen3.5's tool calls write parameter values as raw text, so a patch goes through
  unescaped); a call comes back as a `custom_tool_call` item with that text as its `input`, and the grammar is
  held while sampling where tool calls run under a grammar (`ToolNames.grammars`).
- `namespace` groups (Codex CLI puts each MCP server's tools, and some of its own, in one) are flattened: member
  `name` of namespace `ns` is shown as `flat_name(ns, name)`, and its calls come back with `name` and `namespace`
  apart, as Codex routes them.
- A client-executed `tool_search` (`execution: "client"`: Codex CLI finds its apps' and MCP servers' tools this
  way) is shown as a function TOOL_SEARCH with the tool's own parameters; its call comes back as a
  `tool_search_call` item, and the client answers with a `tool_search_output` item listing the tools found, which
  are callable from there on (`loaded_tools`), as are those of an `additional_tools` item. A server-executed one
  is left out: every tool given is shown to the model (`defer_loading` is not read), so there is nothing to find.
- Every other type (web_search, file_search, mcp, ...) runs at OpenAI, not here: left out, with a warning logged
  once per type.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hinfer.server.errors import bad_request
from hinfer.server.prompt import ToolChoice
from hinfer.server.schema_base import type_of

log = logging.getLogger(__name__)

CUSTOM_INPUT = "input"  # the one parameter a custom tool is shown with
TOOL_SEARCH = "tool_search"  # the name a client-executed tool search is shown under
_SEARCH_ABOUT = ("Searches for more tools by what they do. The tools found are listed in the result and can be "
                 "called from then on.")
_SEARCH_PARAMETERS = {"type": "object", "properties": {"query": {"type": "string", "description": "What the tool "
                      "should do, in a few words."}}, "required": ["query"]}  # fmt: skip
_warned_tool_types: set[str | None] = set()


def flat_name(namespace: str, name: str) -> str:
    """A namespace member's name as the model sees it (`mcp__files` + `read` -> `mcp__files__read`, the form
    Codex CLI gave MCP tools before it grouped them)."""
    return f"{namespace.rstrip('_')}__{name}"


def _str_field(item: dict[str, Any], key: str, param: str) -> str:
    v = item.get(key)
    if not isinstance(v, str) or not v:
        raise bad_request(f"{key} must be a non-empty string", param=f"{param}.{key}")
    return v


def _members(tools: list[Any] | None, where: str = "tools"
             ) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:  # fmt: skip
    """(param path, tool, its namespace tool or None) for every function and custom tool, namespace members
    included, and a client-executed tool search; other types are logged once and left out."""
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise bad_request("every tool must be an object", param=f"{where}.{i}")
        typ = type_of(tool, f"{where}.{i}")
        if typ in ("function", "custom") or (typ == "tool_search" and _client_search(tool)):
            yield f"{where}.{i}", tool, None
        elif typ == "namespace":
            _str_field(tool, "name", f"{where}.{i}")
            members = tool.get("tools")
            if not isinstance(members, list):
                raise bad_request("a namespace's tools must be a list", param=f"{where}.{i}.tools")
            for j, member in enumerate(members):
                if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                    raise bad_request("a namespace holds function and custom tools",
                                      param=f"{where}.{i}.tools.{j}")
                yield f"{where}.{i}.tools.{j}", member, tool
        elif typ not in _warned_tool_types and len(_warned_tool_types) < 64:  # bounded: types come from clients
            _warned_tool_types.add(typ)
            if typ == "tool_search":
                log.info("a server-executed tool_search is left out: every tool given is shown to the model, "
                         "deferred ones too, so there is nothing to search for")  # fmt: skip
            else:
                log.warning("ignoring Responses tools of type %r: only function, custom, namespace and "
                            "client-executed tool_search tools are supported", typ)  # fmt: skip


def _client_search(tool: dict[str, Any]) -> bool:
    """Whether a tool_search is the client's: `execution: "client"`, or no `execution` but the `parameters` or
    `description` only a client-executed search carries (some clients leave the field out)."""
    execution = tool.get("execution")
    return execution == "client" or (execution is None and (tool.get("parameters") is not None
                                                            or tool.get("description") is not None))


def _custom_parameters(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """A custom tool's one string parameter, its grammar (if any) in the description."""
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
    return {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": about}},
            "required": [CUSTOM_INPUT]}  # fmt: skip


def _shown(tool: dict[str, Any], ns: dict[str, Any] | None) -> str:
    """The name the model sees for a tool (a namespace member's joined with its namespace's)."""
    if tool["type"] == "tool_search":
        return TOOL_SEARCH
    return tool["name"] if ns is None else flat_name(ns["name"], tool["name"])


def convert_tools(tools: list[Any] | None, where: str = "tools") -> list[dict[str, Any]]:
    """-> chat tools ({"type": "function", "function": {name, parameters, description}}); a namespace member's
    description after its namespace's."""
    out = []
    for param, tool, ns in _members(tools, where):
        if tool["type"] != "tool_search":
            _str_field(tool, "name", param)
        if tool["type"] == "custom":
            params = _custom_parameters(tool, param)
        elif tool["type"] == "tool_search":
            params = tool.get("parameters") or _SEARCH_PARAMETERS
            if not isinstance(params, dict):
                raise bad_request("parameters must be a JSON schema object", param=f"{param}.parameters")
            tool = {**tool, "description": tool.get("description") or _SEARCH_ABOUT}
        else:
            params = tool.get("parameters")
            if params is None:
                params = {"type": "object", "properties": {}}
            if not isinstance(params, dict):
                raise bad_request("parameters must be a JSON schema object", param=f"{param}.parameters")
        fn: dict[str, Any] = {"name": _shown(tool, ns), "parameters": params}
        about = [d for d in (_namespace_about(ns), tool.get("description")) if isinstance(d, str) and d]
        if about:
            fn["description"] = "\n\n".join(about)
        out.append({"type": "function", "function": fn})
    return out


def _namespace_about(ns: dict[str, Any] | None) -> str | None:
    if ns is None:
        return None
    d = ns.get("description")
    return f"({ns['name']}) {d}" if isinstance(d, str) and d else f"({ns['name']})"


@dataclass(frozen=True)
class ToolNames:
    """How a request's tool calls go back: namespace members by the name the model calls them (flat_name) ->
    (namespace, name); the custom tools by that name; their grammars (StructuredOutput.tool_grammars); whether
    TOOL_SEARCH is the client's tool search."""

    namespaced: dict[str, tuple[str, str]]
    custom: frozenset[str]
    grammars: dict[str, dict[str, str]] | None
    search: bool = False


def tool_names(tools: list[Any] | None) -> ToolNames:
    namespaced, custom, grammars, search = {}, set(), {}, False
    for _, tool, ns in _members(tools):
        if tool["type"] == "tool_search":
            search = True
            continue
        if not isinstance(tool.get("name"), str):
            continue  # convert_tools reports it
        shown = _shown(tool, ns)
        if ns is not None:
            namespaced[shown] = (ns["name"], tool["name"])
        if tool["type"] == "custom":
            custom.add(shown)
            fmt = tool.get("format")
            if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
                grammars[shown] = {"parameter": CUSTOM_INPUT, "syntax": fmt.get("syntax") or "lark",
                                   "definition": fmt["definition"]}  # fmt: skip
    return ToolNames(namespaced, frozenset(custom), grammars or None, search)


def loaded_tools(items: list[Any]) -> list[Any]:
    """The tools a conversation's `tool_search_output` and `additional_tools` items made callable, in order (after
    convert_items, which checks them)."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") in ("tool_search_output", "additional_tools"):
            out.extend(item["tools"])  # a list: convert_items checked it
    return out


def shown_name(item: dict[str, Any], param: str) -> str:
    """The name the model sees for a function_call / custom_tool_call item (its namespace, if any, joined in)."""
    name = _str_field(item, "name", param)
    ns = item.get("namespace")
    return flat_name(ns, name) if isinstance(ns, str) and ns else name


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


def search_arguments(arguments: str) -> Any:
    """A tool search call's arguments as the object the item carries (the tool parser writes JSON); a call that
    came out otherwise keeps its raw text."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _allowed_names(tools: Any) -> tuple[str, ...]:
    """allowed_tools' tools -> the names the model calls them by: function and custom tools by `name` (and
    `namespace`); other types (mcp, image_generation, ...) run at OpenAI and are left out."""
    if not isinstance(tools, list) or not tools:
        raise bad_request("allowed_tools needs a non-empty list of tools", param="tool_choice.tools")
    names = tuple(shown_name(t, f"tool_choice.tools.{i}") for i, t in enumerate(tools)
                  if isinstance(t, dict) and t.get("type") in ("function", "custom"))  # fmt: skip
    if not names:
        raise bad_request("allowed_tools lists no function or custom tool", param="tool_choice.tools")
    return names


def convert_tool_choice(raw: str | dict[str, Any] | None, parallel: bool | None) -> ToolChoice:
    if raw is None or raw == "auto":
        choice = ToolChoice("auto")
    elif raw in ("none", "required"):
        choice = ToolChoice(str(raw))
    elif isinstance(raw, dict) and raw.get("type") in ("function", "custom"):
        if not isinstance(raw.get("name"), str):
            raise bad_request(f"tool_choice of type {raw['type']!r} needs a name", param="tool_choice.name")
        choice = ToolChoice("named", shown_name(raw, "tool_choice"))
    elif isinstance(raw, dict) and raw.get("type") == "allowed_tools":
        if raw.get("mode") not in ("auto", "required"):
            raise bad_request("allowed_tools' mode must be 'auto' or 'required'", param="tool_choice.mode")
        choice = ToolChoice(raw["mode"], allowed=_allowed_names(raw.get("tools")))
    elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
        log.warning("tool_choice of type %r is not supported; using auto", raw["type"])
        choice = ToolChoice("auto")
    else:
        raise bad_request("tool_choice must be 'auto', 'none', 'required', {'type': 'function' | 'custom', "
                          "'name': ...} or {'type': 'allowed_tools', 'mode', 'tools'}", param="tool_choice")
    choice.parallel = parallel is not False
    return choice
