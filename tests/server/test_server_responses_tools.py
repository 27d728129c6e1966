"""Responses tools -> chat tools and back, without a server: custom (freeform) tools as one string parameter,
namespace groups flattened, the client's tool search and the tools it finds, tool_choice, and the 400s of
malformed tools."""

from __future__ import annotations

import pytest

from hinfer.server.errors import APIError
from hinfer.server.prompt import loaded_text
from hinfer.server.responses_convert import convert_items
from hinfer.server.responses_tools import (
    CUSTOM_INPUT,
    TOOL_SEARCH,
    convert_tool_choice,
    convert_tools,
    custom_input,
    flat_name,
    loaded_tools,
    search_arguments,
    tool_names,
)


def test_custom_tools_are_one_string_parameter_and_come_back_as_text():
    tools = [{"type": "custom", "name": "apply_patch", "description": "Patch.",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: LINE+"}},
             {"type": "custom", "name": "note"}, {"type": "web_search"},
             {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
    out = convert_tools(tools)
    assert [t["function"]["name"] for t in out] == ["apply_patch", "note", "f"]
    fn = out[0]["function"]
    assert fn["description"] == "Patch." and fn["parameters"]["required"] == [CUSTOM_INPUT]
    about = fn["parameters"]["properties"][CUSTOM_INPUT]
    assert about["type"] == "string" and about["description"].endswith("lark grammar:\nstart: LINE+")
    assert "description" not in out[1]["function"]
    names = tool_names(tools)
    assert names.custom == {"apply_patch", "note"} and names.namespaced == {}
    assert names.grammars == {"apply_patch": {"parameter": CUSTOM_INPUT, "syntax": "lark",
                                              "definition": "start: LINE+"}}
    assert tool_names(tools[1:]).grammars is None
    assert custom_input('{"input": "a\\nb \\"c\\""}') == 'a\nb "c"'
    assert custom_input("not json") == "not json" and custom_input('{"other": 1}') == '{"other": 1}'
    choice = convert_tool_choice({"type": "custom", "name": "apply_patch"}, None)
    assert (choice.mode, choice.name) == ("named", "apply_patch")




def test_namespaces_are_flattened_and_their_calls_keep_both_names():
    """Codex CLI's MCP groups: each member shown as namespace__name (the namespace's description before its own),
    history items with a namespace rendered under that name, a choice naming a member by both."""
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}},
             {"type": "namespace", "name": "mcp__files", "description": "Files on disk.", "tools": [
                 {"type": "function", "name": "read", "description": "Read one.",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
                 {"type": "custom", "name": "write"}]}]  # fmt: skip
    out = convert_tools(tools)
    assert [t["function"]["name"] for t in out] == ["shell", "mcp__files__read", "mcp__files__write"]
    assert out[1]["function"]["description"] == "(mcp__files) Files on disk.\n\nRead one."
    assert out[2]["function"]["parameters"]["required"] == [CUSTOM_INPUT]
    names = tool_names(tools)
    assert names.namespaced == {"mcp__files__read": ("mcp__files", "read"), "mcp__files__write": ("mcp__files", "write")}
    assert names.custom == {"mcp__files__write"} and flat_name("mcp__files__", "read") == "mcp__files__read"
    items = [{"role": "user", "content": "go"},
             {"type": "function_call", "call_id": "c1", "name": "read", "namespace": "mcp__files", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "text"}]
    assert convert_items(items, None)[1]["tool_calls"][0]["function"]["name"] == "mcp__files__read"
    choice = convert_tool_choice({"type": "function", "name": "read", "namespace": "mcp__files"}, None)
    assert (choice.mode, choice.name) == ("named", "mcp__files__read")


@pytest.mark.parametrize("tool, param", [
    ({"type": "custom"}, "tools.0.name"),
    ({"type": "custom", "name": "x", "format": {"type": "regex"}}, "tools.0.format"),
    ({"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "lark"}}, "tools.0.format.definition"),
    ({"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "peg", "definition": "a"}},
     "tools.0.format.syntax"),
])  # fmt: skip
def test_bad_custom_tools_are_400(tool, param):
    with pytest.raises(APIError) as e:
        convert_tools([tool])
    assert e.value.status == 400 and e.value.param == param
    with pytest.raises(APIError) as e:
        convert_items([{"type": "custom_tool_call", "call_id": "c", "name": "x", "input": 3}], None)
    assert e.value.param == "input.0.input"


@pytest.mark.parametrize("tool, param", [
    ({"type": "namespace", "tools": []}, "tools.0.name"),
    ({"type": "namespace", "name": "ns", "tools": {}}, "tools.0.tools"),
    ({"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}, "tools.0.tools.0"),
    ({"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}, "tools.0.tools.0.name"),
])  # fmt: skip
def test_bad_namespaces_are_400(tool, param):
    with pytest.raises(APIError) as e:
        convert_tools([tool])
    assert e.value.status == 400 and e.value.param == param


def test_client_tool_search_is_a_function_and_server_search_is_left_out():
    out = convert_tools([{"type": "tool_search", "execution": "client"}, {"type": "tool_search"},
                         {"type": "tool_search", "execution": "server"}])
    assert [t["function"]["name"] for t in out] == [TOOL_SEARCH]
    fn = out[0]["function"]  # the defaults where the client gives no description or parameters
    assert fn["parameters"]["required"] == ["query"] and fn["description"].startswith("Searches for more tools")
    assert tool_names([{"type": "tool_search", "execution": "client"}]).search
    assert not tool_names([{"type": "tool_search"}]).search
    # no `execution`, but the parameters only a client's search carries: the client's
    assert tool_names([{"type": "tool_search", "parameters": {"type": "object"}}]).search
    assert not tool_names([{"type": "tool_search", "execution": "server", "description": "d"}]).search
    assert search_arguments('{"query": "x"}') == {"query": "x"} and search_arguments("oops") == "oops"


def test_found_tools_are_listed_where_found_and_callable():
    """A tool_search_output renders as a tool response listing the tools found (in the system prompt's form); an
    additional_tools item as a system message; both are gathered for the parser."""
    found = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}, "defer_loading": True}]
    items = [{"role": "user", "content": "go"},
             {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {"query": "q"}},
             {"type": "tool_search_output", "call_id": "s1", "execution": "client", "tools": found},
             {"type": "additional_tools", "role": "developer", "tools": []}]
    loaded: list = []
    msgs = convert_items(items, None, loaded=loaded)
    assert msgs[1]["tool_calls"][0]["function"] == {"name": TOOL_SEARCH, "arguments": {"query": "q"}}
    assert msgs[2] == {"role": "tool", "tool_call_id": "s1", "content": loaded_text(loaded)}
    assert loaded == convert_tools(found) and loaded_tools(items) == found
    assert loaded_text(loaded) == ('These functions can be called from now on:\n<tools>\n{"type": "function", '
                                   '"function": {"name": "lookup", "parameters": {"type": "object"}}}\n</tools>')
    assert msgs[3] == {"role": "system", "content": "No tools were found."}


@pytest.mark.parametrize("item, param", [
    ({"type": "tool_search_output", "call_id": "s", "tools": {}}, "input.0.tools"),
    ({"type": "tool_search_output", "call_id": "s", "tools": [{"type": "function"}]}, "input.0.tools.0.name"),
    ({"type": "additional_tools", "tools": [{"type": "namespace", "name": "n", "tools": [3]}]}, "input.0.tools.0.tools.0"),
    ({"type": "tool_search_call", "call_id": "s", "arguments": "[1]"}, "input.0.arguments"),
])  # fmt: skip
def test_bad_search_items_are_400(item, param):
    with pytest.raises(APIError) as e:
        convert_items([item], None)
    assert e.value.status == 400 and e.value.param == param


def test_allowed_tools_choice():
    choice = convert_tool_choice({"type": "allowed_tools", "mode": "required", "tools": [
        {"type": "function", "name": "read", "namespace": "mcp__files"}, {"type": "custom", "name": "apply_patch"},
        {"type": "mcp", "server_label": "x"}]}, None)  # fmt: skip
    assert (choice.mode, choice.allowed) == ("required", ("mcp__files__read", "apply_patch"))
    for bad, param in (({"type": "allowed_tools", "mode": "maybe", "tools": []}, "tool_choice.mode"),
                       ({"type": "allowed_tools", "mode": "auto", "tools": []}, "tool_choice.tools"),
                       ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp"}]}, "tool_choice.tools")):
        with pytest.raises(APIError) as e:
            convert_tool_choice(bad, None)
        assert e.value.param == param
