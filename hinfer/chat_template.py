"""Chat template rendering, compatible with Hugging Face transformers' `apply_chat_template`.

Templates come from checkpoints (untrusted), so they run in jinja2's immutable sandbox. The environment,
globals, filters and input normalization follow what transformers does, so a prompt rendered here is the
prompt the model was trained / evaluated with.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hinfer.errors import TemplateError

# Names a message's reasoning may come under; templates read `reasoning_content` (transformers aliases them).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja's own tojson HTML-escapes `<>&'`; templates expect plain json.dumps (keys in order, no escaping).
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """`dict(...)` for templates without exposing the dict type itself (no attribute tricks on it)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """jinja's namespace, refusing underscore names so a template cannot shadow CPython internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as jinja's Namespace
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} may not start with '_'")


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (transformers' assistant-mask marker): renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _Namespace
    return env


def _plain(value: Any) -> Any:
    """A fresh copy built from JSON-like types only: the sandbox never sees caller objects, and rendering
    never mutates the caller's messages. Unknown objects become an inert '<TypeName>' string."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):  # str subclasses (enums...) carry extra methods: strip them
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):  # pydantic models (e.g. OpenAI SDK messages)
        return _plain(value.model_dump())
    if isinstance(value, np.generic):  # np.bool_(False) must stay falsy
        return _plain(value.item())
    return f"<{type(value).__name__}>"


def normalize_messages(messages: list[Any]) -> list[dict]:
    """What transformers does to messages before rendering: plain copies, keys whose value is None dropped
    (OpenAI clients send `content: null` next to tool calls), and reasoning aliased to `reasoning_content`."""
    out = []
    for message in messages:
        message = _plain(message)
        if not isinstance(message, dict):
            raise TemplateError(f"chat messages must be objects, got {type(message).__name__}")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class ChatTemplate:
    """A compiled chat template. `render` returns the prompt text (not tokenized)."""

    _env: ImmutableSandboxedEnvironment | None = None

    def __init__(self, source: str) -> None:
        self.source = source
        if ChatTemplate._env is None:
            ChatTemplate._env = _environment()
        try:
            self._template = ChatTemplate._env.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise TemplateError(
                f"chat template syntax error (line {e.lineno}): {_one_line(e.message or '')}"
            ) from e
        except jinja2.exceptions.TemplateError as e:
            raise TemplateError(f"chat template error: {_one_line(str(e))}") from e

    def render(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """Render `messages`; extra kwargs (enable_thinking, special token strings, ...) go into the context.

        Raises TemplateError with a one-line message for `raise_exception` calls and any other failure."""
        if tools is not None:
            for tool in tools:
                if not isinstance(tool, Mapping):
                    raise TemplateError(f"tools must be JSON schema objects, got {type(tool).__name__}")
        context = {
            **_plain(kwargs),
            "messages": normalize_messages(messages),
            "tools": _plain(tools),
            "documents": _plain(kwargs.get("documents")),
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**context)
        except jinja2.exceptions.TemplateError as e:
            # raise_exception('...') lands here with the template's own message
            raise TemplateError(_one_line(str(e)) or "chat template raised an error") from e
        except Exception as e:  # bad message shapes surface as TypeError etc. inside the template
            raise TemplateError(f"chat template failed: {type(e).__name__}: {_one_line(str(e))}") from e
