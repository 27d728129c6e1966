"""Chat template rendering against transformers' apply_chat_template on the fixture Qwen3.6 template."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from hinfer.chat_template import ChatTemplate
from hinfer.errors import TemplateError
from hinfer.tokenizer import Tokenizer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city. Returns °C & <html>-free text.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. 北京"},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search documents.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filters": {"type": "object"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "exact": {"type": "boolean"},
                "limit": {"type": "number"},
            },
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What's the weather in Paris and Tokyo?"}


def _call(name: str, arguments: dict[str, Any], call_id: str = "call_0") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TWO_CALLS = {
    "role": "assistant",
    "content": "Let me check both cities.",
    "reasoning_content": "The user wants two cities; call the tool twice.",
    "tool_calls": [
        _call("get_weather", {"city": "Paris", "days": 3}, "call_1"),
        _call("get_weather", {"city": "東京", "days": 1}, "call_2"),
    ],
}
TWO_RESULTS = [
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18, "sky": "cloudy"}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "晴れ, 24°C"},
]

# name -> (messages, tools, kwargs); kwargs go to both renderers unchanged
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any]]] = {
    "user_only": ([{"role": "user", "content": "Hi!"}], None, {"add_generation_prompt": True}),
    "system_user": (
        [SYSTEM, {"role": "user", "content": "Hello 你好 👋"}],
        None,
        {"add_generation_prompt": True},
    ),
    "thinking_off": ([SYSTEM, USER], None, {"add_generation_prompt": True, "enable_thinking": False}),
    "thinking_on_explicit": ([USER], None, {"add_generation_prompt": True, "enable_thinking": True}),
    "no_generation_prompt": (
        [SYSTEM, USER, {"role": "assistant", "content": "Sunny."}],
        None,
        {"add_generation_prompt": False},
    ),
    "multi_turn_reasoning": (
        [
            SYSTEM,
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": "6", "reasoning_content": "\nAdd three and three.\n"},
            {"role": "user", "content": "Thanks"},
        ],
        None,
        {"add_generation_prompt": True},
    ),
    "multi_turn_preserve_thinking": (
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
            {"role": "user", "content": "And 3+3?"},
        ],
        None,
        {"add_generation_prompt": True, "preserve_thinking": True},
    ),
    "inline_think_in_content": (
        [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "<think>\nold thought\n</think>\n\nA1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "<think>new thought</think>A2"},
        ],
        None,
        {"add_generation_prompt": False},
    ),
    "reasoning_alias_field": (
        [USER, {"role": "assistant", "content": "ok", "reasoning": "aliased reasoning"}],
        None,
        {"add_generation_prompt": False},
    ),
    "tools_no_system": ([USER], TOOLS, {"add_generation_prompt": True}),
    "tools_with_system": ([SYSTEM, USER], TOOLS, {"add_generation_prompt": True, "enable_thinking": False}),
    "tools_empty_system": (
        [{"role": "system", "content": "  "}, USER],
        [WEATHER_TOOL],
        {"add_generation_prompt": True},
    ),
    "tool_call_non_string_args": (
        [
            SYSTEM,
            {"role": "user", "content": "Find recent papers"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Search with filters.",
                "tool_calls": [
                    _call(
                        "search",
                        {
                            "query": "linear attention",
                            "limit": 10,
                            "score": 0.5,
                            "exact": False,
                            "recent": True,
                            "cursor": None,
                            "filters": {"year": {"gte": 2024}, "venue": ["NeurIPS", "ICML"], "note": "ü <b>"},
                            "tags": ["gdn", "mamba", 3],
                        },
                    )
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "[]"},
        ],
        TOOLS,
        {"add_generation_prompt": True},
    ),
    "multiple_tool_results_then_answer": (
        [SYSTEM, USER, TWO_CALLS, *TWO_RESULTS, {"role": "assistant", "content": "Paris 18°C, Tokyo 24°C."}],
        TOOLS,
        {"add_generation_prompt": False},
    ),
    "tool_results_then_new_user_turn": (
        [
            USER,
            TWO_CALLS,
            *TWO_RESULTS,
            {"role": "assistant", "content": "Done.", "reasoning_content": "Summarize."},
            {"role": "user", "content": "And Berlin?"},
            {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", {"city": "Berlin"})]},
            {"role": "tool", "content": "rain"},
        ],
        TOOLS,
        {"add_generation_prompt": True, "enable_thinking": True},
    ),
    "tool_calls_preserve_thinking": (
        [USER, TWO_CALLS, *TWO_RESULTS, {"role": "user", "content": "ok"}],
        TOOLS,
        {"add_generation_prompt": True, "preserve_thinking": True, "enable_thinking": False},
    ),
    "content_parts": (
        [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [{"type": "image", "image": "x.png"}, {"type": "text", "text": "What is this?"}],
            },
        ],
        None,
        {"add_generation_prompt": True, "add_vision_id": True},
    ),
}

ERROR_CASES: dict[str, tuple[list[dict[str, Any]], str]] = {
    "no_user_query": (
        [SYSTEM, {"role": "assistant", "content": "hi"}, {"role": "tool", "content": "x"}],
        "No user query found in messages.",
    ),
    "system_not_first": ([USER, SYSTEM], "System message must be at the beginning."),
    "unknown_role": ([USER, {"role": "narrator", "content": "x"}], "Unexpected message role."),
}


@pytest.fixture(scope="module")
def tok_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "qwen3.5-tokenizer"


@pytest.fixture(scope="module")
def ours(tok_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(tok_dir)


@pytest.fixture(scope="module")
def hf(tok_dir: Path, fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """transformers' tokenizer on a checkpoint-like folder, loaded offline once per module."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).symlink_to(tok_dir / name)
    (folder / "config.json").symlink_to(fixtures_dir / "qwen3.6-27b" / "config.json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        # huggingface_hub reads the variable at import time, which may already have happened
        mp.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def test_at_least_twelve_cases() -> None:
    assert len(CASES) >= 12


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_transformers(name: str, ours: Tokenizer, hf: Any) -> None:
    messages, tools, kwargs = CASES[name]
    before = copy.deepcopy(messages)
    expected = hf.apply_chat_template(copy.deepcopy(messages), tools=tools, tokenize=False, **kwargs)
    got = ours.apply_chat_template(messages, tools=tools, **kwargs)
    assert got == expected
    assert messages == before  # rendering never edits the caller's messages


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_errors_match_transformers(name: str, ours: Tokenizer, hf: Any) -> None:
    import jinja2

    messages, message = ERROR_CASES[name]
    with pytest.raises(jinja2.exceptions.TemplateError, match=message):
        hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with pytest.raises(TemplateError) as info:
        ours.apply_chat_template(messages)
    assert str(info.value) == message


def test_fixture_template_landmarks(ours: Tokenizer) -> None:
    # independent of transformers: the behaviour the server's parsers rely on
    text = ours.apply_chat_template([SYSTEM, USER])
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    assert ours.apply_chat_template([USER], enable_thinking=False).endswith("<think>\n\n</think>\n\n")
    text = ours.apply_chat_template([USER, TWO_CALLS, *TWO_RESULTS], tools=TOOLS)
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" in text
    assert "<parameter=days>\n3\n</parameter>" in text
    assert '"description": "City name, e.g. 北京"' in text  # tojson keeps non-ASCII
    assert (
        "<|im_start|>user\n<tool_response>\n" in text and "晴れ, 24°C\n</tool_response><|im_end|>\n" in text
    )


def test_string_arguments_are_an_error(ours: Tokenizer) -> None:
    # OpenAI sends arguments as a JSON string; the template needs a mapping, so callers must parse it first
    bad = {"role": "assistant", "content": "", "tool_calls": [_call("search", '{"query": "x"}')]}  # type: ignore[arg-type]
    with pytest.raises(TemplateError, match="mapping"):
        ours.apply_chat_template([USER, bad], tools=TOOLS)


# ---- the environment itself, checked against transformers' renderer on small templates

ENV_TEMPLATES = {
    "tojson_default": "{{ x | tojson }}",
    "tojson_indent": "{{ x | tojson(indent=2) }}",
    "tojson_separators_sorted": "{{ x | tojson(separators=(',', ':'), sort_keys=true) }}",
    "tojson_ascii": "{{ x | tojson(ensure_ascii=true) }}",
    "trim_lstrip_blocks": "A\n  {% if true %}\n    B\n  {% endif %}\nC {{- ' D ' -}} E",
    "loop_controls": "{% for i in range(6) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "namespace_dict": "{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{{ dict(a=1, b=[2]) | tojson }}",
    "loop_helpers": "{% for m in messages %}{{ loop.index0 }}{{ loop.previtem.role if loop.previtem }}{{ loop.nextitem.role if loop.nextitem }};{% endfor %}",
    "generation_tag": "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "kwargs_and_tools": "{{ tools | length }}|{{ add_generation_prompt }}|{{ custom }}|{{ documents is none }}",
    "none_keys_dropped": "{% for m in messages %}{{ m.content is defined }}{{ m.get('name') }}{% endfor %}",
}
ENV_VALUES = {"x": {"b": [1, 2.5, None, True], "a": "é<&>'\"", "c": {"z": {}}}}
ENV_MESSAGES = [{"role": "user", "content": "u"}, {"role": "assistant", "content": None, "name": "bot"}]


@pytest.mark.parametrize("name", sorted(ENV_TEMPLATES))
def test_environment_matches_transformers(name: str) -> None:
    pytest.importorskip("transformers")
    from transformers.utils.chat_template_utils import render_jinja_template

    from hinfer.chat_template import normalize_messages

    source = ENV_TEMPLATES[name]
    kwargs = {**ENV_VALUES, "custom": "c"}
    # transformers drops None-valued keys in apply_chat_template, before render_jinja_template
    hf_messages = [{k: v for k, v in m.items() if v is not None} for m in ENV_MESSAGES]
    (expected,), _ = render_jinja_template(
        conversations=[hf_messages],
        tools=[WEATHER_TOOL],
        chat_template=source,
        add_generation_prompt=True,
        **kwargs,
    )
    assert ChatTemplate(source).render(ENV_MESSAGES, tools=[WEATHER_TOOL], **kwargs) == expected
    assert normalize_messages(ENV_MESSAGES)[1] == {"role": "assistant", "name": "bot"}


def test_strftime_now() -> None:
    import datetime

    year = ChatTemplate("{{ strftime_now('%Y') }}").render([])
    assert year in {str(datetime.date.today().year), str(datetime.date.today().year + 1)}


@pytest.mark.parametrize(
    "source, message",
    [
        ("{% if %}", r"syntax error \(line 1\)"),
        ("{% for x in y %}", "syntax error"),
        ("{{ raise_exception('custom failure') }}", "^custom failure$"),
        ("{% set ns = namespace(_x=1) %}", "may not start with"),
        ("{% set l = [] %}{{ l.append(1) }}", "unsafe"),
        ("{{ ''.__class__.__mro__ }}", "unsafe|__class__"),
        ("{{ messages[0].content + 1 }}", "TypeError"),
    ],
)
def test_template_errors_are_one_line(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message) as info:
        ChatTemplate(source).render([{"role": "user", "content": "x"}])
    assert "\n" not in str(info.value)


def test_render_does_not_leak_objects() -> None:
    class Opaque:
        secret = "s"

    out = ChatTemplate("{{ messages[0].content }}|{{ messages[0].extra }}").render(
        [{"role": "user", "content": "hi", "extra": Opaque()}]
    )
    assert out == "hi|<Opaque>"
