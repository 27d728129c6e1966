"""Each dialect's structured-output fields -> StructuredOutput for the engine (docs/structured-output.md).

- OpenAI chat `response_format`: `json_object`, `json_schema` (`json_schema.schema`; `strict` or not, the
  schema is enforced); vLLM's extra fields `structured_outputs` (`json`, `regex`, `choice`) and the older
  `guided_json` / `guided_regex` / `guided_choice`.
- Responses `text.format`: `json_object`, `json_schema` (`schema` at the top level of the format).
- Anthropic `output_config.format`: `json_schema` (`schema`).
- Forced tool calls, every dialect: `tool_choice` required / any / named -> the answer is Qwen tool calls.
- Checked tool calls (`hinfer serve --tool-call-grammar`), every dialect: `tool_choice` auto with tools and no
  other constraint -> free text, each call the model starts held to a valid call.
With thinking on, the constraint starts after the reasoning (`</think>`); the reasoning itself is free.
"""

from __future__ import annotations

import re
from typing import Any

from hinfer.sampling_params import StructuredOutput
from hinfer.server.errors import bad_request
from hinfer.server.prompt import ChatPrompt

JSON_OBJECT: dict[str, Any] = {"type": "object"}


def _schema(value: Any, param: str) -> dict[str, Any] | bool:
    if isinstance(value, bool) or (isinstance(value, dict)):
        return value
    raise bad_request("the JSON schema must be an object", param=param)


def openai_response_format(rf: dict[str, Any] | None) -> dict[str, Any] | bool | None:
    """Chat `response_format` -> the schema to enforce, or None for plain text."""
    if rf is None:
        return None
    typ = rf.get("type")
    if typ in (None, "text"):
        return None
    if typ == "json_object":
        return JSON_OBJECT
    if typ == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise bad_request("response_format json_schema needs a 'json_schema' object",
                              param="response_format.json_schema")
        return _schema(js.get("schema", JSON_OBJECT), "response_format.json_schema.schema")
    raise bad_request(f"response_format type {typ!r} is not supported; expected text, json_object or json_schema",
                      param="response_format.type")


def responses_text_format(text: dict[str, Any] | None) -> dict[str, Any] | bool | None:
    """Responses `text.format` -> the schema to enforce, or None for plain text."""
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return JSON_OBJECT
    if fmt["type"] == "json_schema":
        return _schema(fmt.get("schema", JSON_OBJECT), "text.format.schema")
    raise bad_request(f"text.format type {fmt['type']!r} is not supported; expected text, json_object or "
                      "json_schema", param="text.format.type")


def anthropic_output_format(output_config: Any) -> dict[str, Any] | bool | None:
    """Anthropic `output_config.format` -> the schema to enforce, or None."""
    fmt = output_config.get("format") if isinstance(output_config, dict) else None
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise bad_request("output_config.format must be {'type': 'json_schema', 'schema': {...}}",
                          param="output_config.format")
    return _schema(fmt.get("schema"), "output_config.format.schema")


def vllm_extras(extra: dict[str, Any]) -> StructuredOutput | None:
    """vLLM's `structured_outputs: {json | regex | choice}` and `guided_json | guided_regex | guided_choice`."""
    so = extra.get("structured_outputs")
    so = so if isinstance(so, dict) else {}
    json_schema = so.get("json", extra.get("guided_json"))
    regex = so.get("regex", extra.get("guided_regex"))
    choice = so.get("choice", extra.get("guided_choice"))
    if choice is not None:
        if not isinstance(choice, list) or not choice or not all(isinstance(c, str) for c in choice):
            raise bad_request("structured_outputs.choice must be a list of strings", param="structured_outputs")
        regex = "|".join(re.escape(c) for c in choice)
    if regex is not None and not isinstance(regex, str):
        raise bad_request("structured_outputs.regex must be a string", param="structured_outputs")
    if json_schema is not None and regex is not None:
        raise bad_request("structured_outputs: give one of json, regex, choice", param="structured_outputs")
    if json_schema is not None:
        return StructuredOutput(json_schema=_schema(json_schema, "structured_outputs.json"))
    return StructuredOutput(regex=regex) if regex is not None else None


def forced_tools(prompt: ChatPrompt) -> StructuredOutput | None:
    """tool_choice required / named: the answer must be calls to the tools given or loaded (the named one)."""
    if prompt.tool_choice.mode not in ("required", "named") or not prompt.callable_tools():
        return None
    return StructuredOutput(tools=prompt.callable_tools(), tool_name=prompt.tool_choice.name,
                            parallel_tool_calls=prompt.tool_choice.parallel, tool_grammars=prompt.tool_grammars)


def checked_tools(prompt: ChatPrompt) -> StructuredOutput | None:
    """tool_choice auto with tools (`hinfer serve --tool-call-grammar`): free text, but every call the model
    starts must be a valid call to one of those given or loaded."""
    if prompt.tool_choice.mode != "auto" or not prompt.callable_tools():
        return None
    return StructuredOutput(tools=prompt.callable_tools(), parallel_tool_calls=prompt.tool_choice.parallel,
                            tools_optional=True, tool_grammars=prompt.tool_grammars)


def calls_under_grammar(so: StructuredOutput | None) -> bool:
    """The answer's tool calls are written under a grammar (forced, or checked), which treats the whitespace
    around a string value as padding: the parser trims it (hinfer/server/tool_parser.py)."""
    return so is not None and so.tools is not None


def constraint(prompt: ChatPrompt, schema: dict[str, Any] | bool | None = None,
               other: StructuredOutput | None = None, param: str = "response_format",
               tool_grammar: bool = False) -> StructuredOutput | None:
    """The request's one constraint: a forced tool call, a JSON schema, or vLLM's extras; two of them are a 400.
    None of them and `tool_grammar` (the server's --tool-call-grammar): the auto tool calls are checked."""
    found = [x for x in (forced_tools(prompt), None if schema is None else StructuredOutput(json_schema=schema),
                         other) if x is not None]  # fmt: skip
    if len(found) > 1:
        raise bad_request("a forced tool_choice and a structured output format cannot be combined", param=param)
    mid_answer = bool(prompt.continuation) and not prompt.starts_in_reasoning()  # an assistant prefill continued
    if not found and tool_grammar and not mid_answer and (auto := checked_tools(prompt)) is not None:
        found = [auto]
    if not found:
        return None
    if mid_answer:
        raise bad_request("a continued answer (an assistant prefill) cannot be constrained: the constraint "
                          "starts at the answer's beginning", param=param)  # fmt: skip
    so = found[0]
    so.after_reasoning = prompt.starts_in_reasoning()
    return so
