"""Incremental parser for Qwen3.5 tool calls in generated text.

The format (taught by the chat template):

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    VALUE
    </parameter>
    </function>
    </tool_call>

A call is committed (ToolCallStart emitted) once `<function=NAME>` names a tool of the request; each
parameter is emitted as a JSON fragment when its `</parameter>` arrives, so the arguments stream while the
model writes them and their concatenation is a JSON object. Anything that is not this shape before the
commit point (unknown function, stray `<tool_call>`) goes out as plain text; garbage after a committed call
closes the call and is passed on as text. Nothing here raises on model output.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hinfer.server.reasoning import _partial_suffix

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
FUNC_OPEN = "<function="
FUNC_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"
_MAX_TAG = 256  # a tag name longer than this is not a tag: degrade instead of buffering forever
_HEAD = re.compile(r"<function=([^>\n]*)>")
_PARAM_HEAD = re.compile(r"<parameter=([^>\n]*)>")


@dataclass
class TextPiece:
    text: str


@dataclass
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass
class ToolCallArgs:
    index: int
    delta: str  # a fragment of the arguments' JSON text


@dataclass
class ToolCallEnd:
    index: int


ToolEvent = TextPiece | ToolCallStart | ToolCallArgs | ToolCallEnd


@dataclass
class ParsedCall:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    arguments_json: str = ""


# -- value conversion -------------------------------------------------------------------------------------


def _schema_types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    types = [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                types.extend(_schema_types(alt))
    if not types and "enum" in schema and isinstance(schema["enum"], list):
        types = sorted({_json_type(v) for v in schema["enum"]})
    return types


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if v is None:
        return "null"
    return "string" if isinstance(v, str) else "object"


def _convert_one(raw: str, typ: str) -> tuple[bool, Any]:
    s = raw.strip()
    if typ == "string":
        return True, raw
    if typ == "integer":
        try:
            return True, int(s)
        except ValueError:
            try:
                f = float(s)
                return (True, int(f)) if f.is_integer() else (False, None)
            except (ValueError, OverflowError):
                return False, None
    if typ == "number":
        try:
            return True, int(s)
        except ValueError:
            try:
                f = float(s)
                return (True, f) if math.isfinite(f) else (False, None)
            except ValueError:
                return False, None
    if typ == "boolean":
        low = s.lower()
        if low in ("true", "false"):
            return True, low == "true"
        return False, None
    if typ == "null":
        return (True, None) if s.lower() in ("null", "none") else (False, None)
    if typ in ("object", "array"):
        try:
            v = json.loads(s)
        except (ValueError, RecursionError):
            return False, None
        ok = isinstance(v, dict) if typ == "object" else isinstance(v, list)
        return ok, v
    return False, None


def convert_value(raw: str, schema: Any) -> Any:
    """The parameter's text as the JSON type its schema declares; the text itself when that fails."""
    types = _schema_types(schema)
    # Non-string types first: "5" under ["integer", "string"] should become 5.
    for typ in sorted(types, key=lambda t: t == "string"):
        ok, v = _convert_one(raw, typ)
        if ok:
            return v
    return raw


def tool_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """OpenAI-style tool list -> {name: parameters schema}."""
    out: dict[str, dict[str, Any]] = {}
    for t in tools:
        fn = t.get("function", t)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


# -- the parser -------------------------------------------------------------------------------------------

_TEXT, _HEAD_STATE, _PARAMS, _TAIL = range(4)


class ToolCallParser:
    def __init__(self, tools: dict[str, dict[str, Any]], new_id: Callable[[], str], trim_strings: bool = False):
        """`trim_strings`: the calls were written under a grammar (forced tool choice), which treats whitespace
        around a value as padding: string values are stripped, as the grammar measured them."""
        self._tools = tools
        self._trim = trim_strings
        self._new_id = new_id
        self._state = _TEXT
        self._buf = ""
        self.calls: list[ParsedCall] = []
        self._after_call = False  # text between and after calls is usually just newlines: drop those
        self._ws_before_call = ""

    def feed(self, text: str) -> list[ToolEvent]:
        self._buf += text
        out: list[ToolEvent] = []
        while self._step(out, final=False):
            pass
        return out

    def flush(self) -> list[ToolEvent]:
        out: list[ToolEvent] = []
        while self._step(out, final=True):
            pass
        if self._state == _PARAMS:  # cut off inside a call (max_tokens): close it with what was parsed
            self._close_call(out)
        self._emit_text(out, self._buf)
        self._buf = ""
        self._state = _TEXT
        return out

    # Each step consumes from the buffer and returns True to go on, False to wait for more text.
    def _step(self, out: list[ToolEvent], final: bool) -> bool:
        if self._state == _TEXT:
            return self._step_text(out, final)
        if self._state == _HEAD_STATE:
            return self._step_head(out, final)
        if self._state == _PARAMS:
            return self._step_params(out, final)
        return self._step_tail(out, final)

    def _step_text(self, out: list[ToolEvent], final: bool) -> bool:
        idx = self._buf.find(CALL_OPEN)
        if idx >= 0:
            before = self._buf[:idx]
            kept = before.rstrip()
            self._ws_before_call = before[len(kept):]
            self._emit_text(out, kept)
            self._buf = self._buf[idx + len(CALL_OPEN):]
            self._state = _HEAD_STATE
            return True
        if final:
            return False
        hold = _partial_suffix(self._buf, CALL_OPEN)
        body = self._buf[: len(self._buf) - hold]
        kept = body.rstrip()  # whitespace right before a call is not content
        self._emit_text(out, kept)
        self._buf = self._buf[len(kept):]
        return False

    def _step_head(self, out: list[ToolEvent], final: bool) -> bool:
        s = self._buf.lstrip()
        m = _HEAD.match(s)
        if m is None:
            waiting = (FUNC_OPEN.startswith(s) or (s.startswith(FUNC_OPEN) and "\n" not in s)) and len(s) < _MAX_TAG
            if waiting and not final:
                return False
            return self._degrade(out)
        name = m.group(1).strip()
        if name not in self._tools:
            return self._degrade(out)
        call = ParsedCall(id=self._new_id(), name=name)
        self.calls.append(call)
        out.append(ToolCallStart(index=len(self.calls) - 1, id=call.id, name=name))
        self._buf = s[m.end():]
        self._state = _PARAMS
        return True

    def _step_params(self, out: list[ToolEvent], final: bool) -> bool:
        s = self._buf.lstrip()
        if s.startswith(FUNC_CLOSE):
            self._close_call(out)
            self._buf = s[len(FUNC_CLOSE):]
            self._state = _TAIL
            return True
        m = _PARAM_HEAD.match(s)
        if m is not None:
            end = s.find(PARAM_CLOSE, m.end())
            rest = end + len(PARAM_CLOSE)
            if end < 0:
                # A forgotten `</parameter>`: `</function>` still ends the value.
                end = rest = s.find(FUNC_CLOSE, m.end())
                if end < 0:
                    if final:  # cut off inside a value (max_tokens): drop the half parameter
                        self._buf = ""
                    return False
            value = s[m.end():end]
            if self._trim:
                value = value.strip()
            else:
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
            self._add_param(out, m.group(1).strip(), value)
            self._buf = s[rest:]
            return True
        undecided = (
            FUNC_CLOSE.startswith(s) or PARAM_OPEN.startswith(s)
            or (s.startswith(PARAM_OPEN) and "\n" not in s and len(s) < _MAX_TAG)
        )
        if undecided:
            if final:  # a tag cut off by max_tokens: drop it, flush() closes the call
                self._buf = ""
            return False
        return self._garbage(out)

    def _step_tail(self, out: list[ToolEvent], final: bool) -> bool:
        s = self._buf.lstrip()
        if s.startswith(CALL_CLOSE):
            self._buf = s[len(CALL_CLOSE):]
        elif (CALL_CLOSE.startswith(s)) and not final:
            return False  # `</tool_call>` may still be coming (or only whitespace so far)
        # A missing `</tool_call>` is forgiven: the call itself was complete.
        self._state = _TEXT
        self._after_call = True
        return True

    # -- helpers ----------------------------------------------------------------------------------------

    def _add_param(self, out: list[ToolEvent], name: str, raw: str) -> None:
        call = self.calls[-1]
        props = self._tools.get(call.name, {}).get("properties")
        schema = props.get(name) if isinstance(props, dict) else None
        value = convert_value(raw, schema) if schema is not None else raw
        sep = "{" if not call.arguments_json else ", "
        frag = sep + json.dumps(name, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False)
        call.arguments[name] = value
        call.arguments_json += frag
        out.append(ToolCallArgs(index=len(self.calls) - 1, delta=frag))

    def _close_call(self, out: list[ToolEvent]) -> None:
        call = self.calls[-1]
        frag = "}" if call.arguments_json else "{}"
        call.arguments_json += frag
        out.append(ToolCallArgs(index=len(self.calls) - 1, delta=frag))
        out.append(ToolCallEnd(index=len(self.calls) - 1))

    def _degrade(self, out: list[ToolEvent]) -> bool:
        """Not a call after all: the `<tool_call>` (with the whitespace before it) is plain text."""
        self._emit_text(out, self._ws_before_call + CALL_OPEN, raw=True)
        self._state = _TEXT
        return True

    def _garbage(self, out: list[ToolEvent]) -> bool:
        """Unexpected text inside a committed call: close the call, the rest is text."""
        self._close_call(out)
        self._state = _TEXT
        self._after_call = True
        return True

    def _emit_text(self, out: list[ToolEvent], text: str, raw: bool = False) -> None:
        if self._after_call and not raw and not text.strip():
            return  # the newlines between and after calls are layout, not content
        if not text:
            return
        self._after_call = False
        if out and isinstance(out[-1], TextPiece):
            out[-1].text += text
        else:
            out.append(TextPiece(text))
