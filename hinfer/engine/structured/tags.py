"""StructuredOutput -> an xgrammar structural tag (JSON-able dict): the one place that knows the output shapes.

- JSON / regex: the value itself; after reasoning: free text up to `</think>`, then "\\n\\n", then the value
  (the Qwen3.5 template's layout of a thinking answer).
- Tools: Qwen3.5 tool calls (`<tool_call>\\n<function=NAME>\\n<parameter=P>\\n...`), the format the chat template
  shows and hinfer/server/tool_parser.py reads, arguments checked against each tool's parameters schema (or, for
  a tool with a grammar, its one parameter's raw text in that grammar): an answer of calls only (forced), or free
  text whose calls are checked (`tools_optional`).
"""

from __future__ import annotations

from typing import Any

from hinfer.sampling_params import StructuredOutput

THINK_END = "</think>"
THINK_EXCLUDES = ["<think>", "</think>"]


TRIGGER = "<tool_call>"
CALL_BEGIN = TRIGGER + "\n<function={name}>\n"
CALL_END = "\n</function>\n</tool_call>"
PARAM_BEGIN = "<parameter={name}>\n"
PARAM_END = "\n</parameter>"


def _grammar(g: dict[str, str]) -> dict[str, Any]:
    """A tool grammar as structural-tag content: lark converted to xgrammar's EBNF, regex as a pattern."""
    if g["syntax"] == "regex":
        return {"type": "regex", "pattern": g["definition"]}
    if g["syntax"] != "lark":
        raise ValueError(f"tool grammar syntax {g['syntax']!r}: lark or regex")
    import xgrammar

    return {"type": "grammar", "grammar": str(xgrammar.Grammar.from_lark(g["definition"]))}


def _tool_calls(so: StructuredOutput) -> dict[str, Any]:
    """One or more calls (one with a named tool or parallel calls off) separated by a newline, nothing else:
    the answer ends after the last call. Arguments are `<parameter=NAME>` blocks (xgrammar's "qwen_xml" style:
    strings as raw text, other types as JSON) checked against the tool's parameters schema."""
    tags = []
    grammars = so.tool_grammars or {}
    for t in so.tools or []:
        fn = t["function"]
        if so.tool_name is not None and fn["name"] != so.tool_name:
            continue
        if fn["name"] in grammars:  # one string parameter, raw text in its grammar
            g = grammars[fn["name"]]
            tags.append({"type": "tag", "begin": CALL_BEGIN.format(name=fn["name"]) + PARAM_BEGIN.format(name=g["parameter"]),
                         "end": PARAM_END + CALL_END, "content": _grammar(g)})  # fmt: skip
            continue
        params = fn.get("parameters")
        tags.append({"type": "tag", "begin": CALL_BEGIN.format(name=fn["name"]), "end": CALL_END,
                     "content": {"type": "json_schema", "json_schema": params if params is not None else True,
                                 "style": "qwen_xml", "max_whitespace_cnt": so.max_json_whitespace}})
    if not tags:
        raise ValueError(f"tool {so.tool_name!r} is not among the tools")
    one = so.tool_name is not None or not so.parallel_tool_calls
    if so.tools_optional:  # free text; each `<tool_call>` (one token) starts a call that must be valid
        return {"type": "triggered_tags", "triggers": [TRIGGER], "tags": tags, "at_least_one": False,
                "stop_after_first": one}
    return {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True,
            "stop_after_first": one}


def structural_tag(so: StructuredOutput) -> dict[str, Any]:
    if so.tools is not None:
        value: dict[str, Any] = _tool_calls(so)
    elif so.regex is not None:
        value = {"type": "regex", "pattern": so.regex}
    else:
        value = {"type": "json_schema", "json_schema": so.json_schema, "max_whitespace_cnt": so.max_json_whitespace}
    if so.after_reasoning:
        reasoning = {"type": "tag", "begin": "", "content": {"type": "any_text", "excludes": THINK_EXCLUDES},
                     "end": THINK_END}
        value = {"type": "sequence", "elements": [reasoning, {"type": "const_string", "value": "\n\n"}, value]}
    return {"type": "structural_tag", "format": value}
