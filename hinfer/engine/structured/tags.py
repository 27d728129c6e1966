"""StructuredOutput -> an xgrammar structural tag (JSON-able dict): the one place that knows the output shapes.

- JSON / regex: the value itself; after reasoning: free text up to `</think>`, then "\\n\\n", then the value
  (the Qwen3.5 template's layout of a thinking answer).
- Tools: xgrammar's built-in Qwen3.5 tool-call format (`<tool_call>\\n<function=NAME>\\n<parameter=P>\\n...`),
  the one hinfer/server/tool_parser.py reads, arguments checked against each tool's parameters schema.
"""

from __future__ import annotations

from typing import Any

from hinfer.sampling_params import StructuredOutput

THINK_END = "</think>"
THINK_EXCLUDES = ["<think>", "</think>"]


def _tool(t: dict[str, Any]) -> dict[str, Any]:
    """The tool as xgrammar reads it; `strict: false` would unconstrain the arguments, so it is dropped."""
    fn = {k: v for k, v in t["function"].items() if k != "strict"}
    return {"type": "function", "function": fn}


def structural_tag(so: StructuredOutput) -> dict[str, Any]:
    if so.tools is not None:
        import xgrammar as xgr

        choice: Any = ({"type": "function", "function": {"name": so.tool_name}} if so.tool_name else "required")
        tag = xgr.get_model_structural_tag(
            "qwen_3_5", tools=[_tool(t) for t in so.tools], tool_choice=choice,
            reasoning="enabled" if so.after_reasoning else "disabled",
            parallel_tool_calls=so.parallel_tool_calls and not so.tool_name,
            max_whitespace_cnt=so.max_json_whitespace)  # fmt: skip
        return tag.model_dump(mode="json")
    if so.regex is not None:
        value: dict[str, Any] = {"type": "regex", "pattern": so.regex}
    else:
        value = {"type": "json_schema", "json_schema": so.json_schema, "max_whitespace_cnt": so.max_json_whitespace}
    if so.after_reasoning:
        reasoning = {"type": "tag", "begin": "", "content": {"type": "any_text", "excludes": THINK_EXCLUDES},
                     "end": THINK_END}
        value = {"type": "sequence", "elements": [reasoning, {"type": "const_string", "value": "\n\n"}, value]}
    return {"type": "structural_tag", "format": value}
