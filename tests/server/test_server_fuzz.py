"""Schema fuzz: random JSON bodies with plausible keys and wrong types never get a 5xx."""

from __future__ import annotations

import json

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_live import MODEL

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                         max_size=3), max_leaves=6)


def maybe(strategy):
    """Usually the plausible value, sometimes any JSON at all (nested fields)."""
    return st.one_of(strategy, strategy, strategy, strategy, strategy, json_values)


def top(strategy):
    """Top-level fields are plausible; `perturbed` corrupts a few of them."""
    return strategy


@st.composite
def perturbed(draw, body_strategy):
    """A plausible body with zero to two top-level fields replaced by arbitrary JSON: one wrong field would
    otherwise stop every example at the schema check, and the deeper paths would go untested."""
    body = draw(body_strategy)
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(sorted(body) + ["model", "messages", "stream", "tools", "max_tokens"]))
        body[key] = draw(json_values)
    return body


text_part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_text", "x"]),
                                   "text": maybe(st.text(max_size=20))})
tool_call = st.fixed_dictionaries({
    "id": maybe(st.text(max_size=5)), "type": maybe(st.just("function")),
    "function": maybe(st.fixed_dictionaries({"name": maybe(st.sampled_from(["get_weather", "x"])),
                                             "arguments": maybe(st.sampled_from(['{"a": 1}', "{", "[]", "", "null"]))}))})
openai_message = st.fixed_dictionaries({
    "role": maybe(st.sampled_from(["system", "developer", "user", "assistant", "tool", "bot"])),
    "content": maybe(st.text(max_size=30) | st.lists(text_part, max_size=2))}, optional={
    "reasoning_content": maybe(st.text(max_size=10)),
    "tool_calls": maybe(st.lists(tool_call, max_size=2)),
    "tool_call_id": maybe(st.text(max_size=5)),
    "name": json_values,
})
openai_tool = st.fixed_dictionaries({"type": maybe(st.just("function")), "function": maybe(st.fixed_dictionaries(
    {"name": maybe(st.sampled_from(["get_weather", "f"])), "parameters": maybe(st.just(
        {"type": "object", "properties": {"a": {"type": "integer"}}}))}))})

# a chat ends with a user turn, sometimes followed by an assistant message to continue (a prefill)
prefill = st.sampled_from([[], [{"role": "assistant", "content": "Sure"}], [{"role": "assistant", "content": "Sure "}],
                           [{"role": "assistant", "content": "", "reasoning_content": "r"}]])  # fmt: skip
openai_chat = st.fixed_dictionaries({"model": st.just(MODEL),
                                     "messages": st.tuples(st.lists(openai_message, max_size=3), prefill).map(
                                         lambda m: m[0] + [{"role": "user", "content": "hi"}] + m[1])}, optional={
    "continue_final_message": top(st.booleans()),
    "add_generation_prompt": top(st.booleans()),
    "stream": top(st.booleans()),
    "stream_options": top(st.fixed_dictionaries({"include_usage": maybe(st.booleans())})),
    "max_tokens": top(st.integers(1, 64) | st.integers(-5, 10**6)),
    "max_completion_tokens": top(st.integers(-5, 64)),
    "temperature": top(st.floats(-1, 3)),
    "top_p": top(st.floats(-1, 2)),
    "top_k": top(st.integers(-3, 10**7)),
    "min_p": top(st.floats(-1, 2)),
    "presence_penalty": top(st.floats(-3, 3)),
    "frequency_penalty": top(st.floats(-3, 3)),
    "repetition_penalty": top(st.floats(-1, 3)),
    "seed": top(st.integers()),
    "stop": top(st.text(max_size=4) | st.lists(st.text(max_size=4), max_size=3)),
    "logit_bias": top(st.dictionaries(st.sampled_from(["1", "x", "-4", "99999999"]), st.floats(-200, 200),
                                        max_size=2)),
    "logprobs": top(st.booleans()),
    "top_logprobs": top(st.integers(-2, 30)),
    "n": top(st.integers(-1, 3)),
    "response_format": top(st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "x"])})),
    "tools": top(st.lists(openai_tool, max_size=2)),
    "tool_choice": top(st.sampled_from(["auto", "none", "required", "x"]) | st.just(
        {"type": "function", "function": {"name": "get_weather"}})),
    "reasoning_effort": top(st.sampled_from(["low", "medium", "high", "none", "max"])),
    "chat_template_kwargs": top(st.dictionaries(st.sampled_from(["enable_thinking", "preserve_thinking",
                                                                   "raise_exception", "messages", "1x", "foo"]),
                                                  json_values, max_size=2)),
})

openai_completion = st.fixed_dictionaries({"model": st.just(MODEL), "prompt": (st.text(max_size=20) | st.lists(st.integers(-2, 300000), max_size=4)
                    | st.lists(st.text(max_size=5), max_size=2))}, optional={
    "max_tokens": top(st.integers(1, 64) | st.integers(-5, 10**6)),
    "logprobs": top(st.integers(-1, 30)),
    "echo": top(st.booleans()),
    "stream": top(st.booleans()),
    "suffix": top(st.text(max_size=3)),
    "temperature": top(st.floats(-1, 3)),
})

block = st.fixed_dictionaries({"type": maybe(st.sampled_from(["text", "image", "tool_use", "tool_result", "thinking",
                                                              "redacted_thinking", "x"]))},
                              optional={"text": maybe(st.text(max_size=10)), "id": maybe(st.text(max_size=4)),
                                        "name": maybe(st.sampled_from(["get_weather", "q"])),
                                        "input": maybe(st.just({"city": "Paris"})),
                                        "tool_use_id": maybe(st.text(max_size=4)),
                                        "content": maybe(st.text(max_size=5)), "thinking": maybe(st.text(max_size=5)),
                                        "is_error": maybe(st.booleans())})
anthropic_message = st.fixed_dictionaries({
    "role": maybe(st.sampled_from(["user", "assistant", "user", "assistant", "system"])),
    "content": maybe(st.text(max_size=20) | st.lists(block, max_size=3)),
})
anthropic_body = st.fixed_dictionaries({"model": st.just(MODEL),
                                        "messages": st.tuples(st.lists(anthropic_message, max_size=3), prefill).map(
                                            lambda m: m[0] + [{"role": "user", "content": "hi"}]
                                            + [{"role": "assistant", "content": p["content"]} for p in m[1]]),
                                        "max_tokens": st.integers(1, 64) | st.integers(-5, 10**6)}, optional={
    "system": top(st.text(max_size=10) | st.lists(block, max_size=2)),
    "stream": top(st.booleans()),
    "stop_sequences": top(st.lists(st.text(max_size=4), max_size=3)),
    "temperature": top(st.floats(-1, 3)),
    "top_p": top(st.floats(-1, 2)),
    "top_k": top(st.integers(-3, 10**7)),
    "tools": top(st.lists(st.fixed_dictionaries({"name": maybe(st.sampled_from(["get_weather", ""])),
                                                   "input_schema": maybe(st.just({"type": "object"}))},
                                                  optional={"type": maybe(st.sampled_from(["custom", "bash_1"]))}),
                            max_size=2)),
    "tool_choice": top(st.fixed_dictionaries({"type": maybe(st.sampled_from(["auto", "any", "tool", "none"]))},
                                               optional={"name": maybe(st.just("get_weather"))})),
    "thinking": top(st.fixed_dictionaries({"type": maybe(st.sampled_from(["enabled", "disabled", "adaptive"]))},
                                            optional={"budget_tokens": maybe(st.integers(-5, 5000))})),
})

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def check(r: httpx.Response, anthropic: bool) -> None:
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        body = r.json()
        if anthropic:
            assert body["type"] == "error" and body["error"]["message"]
        else:
            assert body["error"]["message"] and "type" in body["error"]
    elif "text/event-stream" in r.headers.get("content-type", ""):
        assert '"error"' not in r.text or '"internal_error"' not in r.text


@FUZZ
@given(body=perturbed(openai_chat))
def test_fuzz_chat(http, body):
    check(http.post("/v1/chat/completions", json=body), anthropic=False)


@settings(FUZZ, max_examples=100)
@given(body=perturbed(openai_completion))
def test_fuzz_completions(http, body):
    check(http.post("/v1/completions", json=body), anthropic=False)


@FUZZ
@given(body=perturbed(anthropic_body), path=st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]))
def test_fuzz_messages_and_count_tokens(http, body, path):
    check(http.post(path, json=body), anthropic=True)


@FUZZ
@given(body=json_values)
def test_fuzz_any_json(http, body):
    for path in ("/v1/chat/completions", "/v1/messages"):
        check(http.post(path, json=body), anthropic=path == "/v1/messages")


# -- Responses and Conversations: items, parts and tools stay raw JSON past the schema, so their `type` (and any
# field) may be any JSON value at all
def any_or(values: list):
    return maybe(st.sampled_from(values))


responses_part = st.fixed_dictionaries({"type": any_or(["input_text", "output_text", "input_image", "refusal",
                                                        "summary_text", "input_file", "x"])},
                                       optional={"text": maybe(st.text(max_size=10)),
                                                 "image_url": maybe(st.just("data:image/png;base64,AAAA")),
                                                 "refusal": maybe(st.text(max_size=4))})  # fmt: skip
responses_tool = st.fixed_dictionaries({"type": any_or(["function", "custom", "namespace", "tool_search",
                                                        "web_search", "x"])},
                                       optional={"name": maybe(st.sampled_from(["get_weather", "ns", ""])),
                                                 "parameters": maybe(st.just({"type": "object"})),
                                                 "format": maybe(st.just({"type": "grammar", "syntax": "lark",
                                                                          "definition": "start: /.+/"})),
                                                 "execution": any_or(["client", "server"]),
                                                 "tools": maybe(st.just([{"type": "function", "name": "f"}]))})  # fmt: skip
responses_item = st.fixed_dictionaries({"type": any_or([
    "message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
    "tool_search_call", "tool_search_output", "additional_tools", "item_reference", "x"])}, optional={
    "role": any_or(["user", "assistant", "system", "developer", "tool"]),
    "content": maybe(st.text(max_size=10) | st.lists(responses_part, max_size=2)),
    "call_id": maybe(st.text(max_size=4)), "name": maybe(st.sampled_from(["get_weather", "f"])),
    "arguments": maybe(st.sampled_from(['{"city": "x"}', "{", ""])), "input": maybe(st.text(max_size=6)),
    "output": maybe(st.text(max_size=6) | st.lists(responses_part, max_size=2)),
    "tools": maybe(st.lists(responses_tool, max_size=2)), "namespace": maybe(st.just("ns")),
    "summary": maybe(st.lists(responses_part, max_size=1)), "encrypted_content": maybe(st.text(max_size=6)),
})  # fmt: skip
responses_body = st.fixed_dictionaries({"model": st.just(MODEL),
                                        "input": st.text(max_size=10) | st.lists(responses_item, max_size=4).map(
                                            lambda items: items + [{"role": "user", "content": "hi"}])}, optional={
    "instructions": top(st.text(max_size=6)),
    "stream": top(st.booleans()),
    "store": top(st.booleans()),
    "max_output_tokens": top(st.integers(1, 64) | st.integers(-5, 10**6)),
    "tools": top(st.lists(responses_tool, max_size=3)),
    "tool_choice": top(st.sampled_from(["auto", "none", "required"]) | st.fixed_dictionaries(
        {"type": any_or(["function", "custom", "allowed_tools", "x"])}, optional={"name": maybe(st.just("f"))})),
    "text": top(st.fixed_dictionaries({"format": maybe(st.fixed_dictionaries(
        {"type": any_or(["text", "json_schema", "json_object"])},
        optional={"schema": maybe(st.just({"type": "object"})), "name": maybe(st.just("x"))}))})),
    "reasoning": top(st.fixed_dictionaries({"effort": maybe(st.sampled_from(["low", "none", "max"]))})),
    "include": top(st.lists(st.sampled_from(["reasoning.encrypted_content", "x"]), max_size=2)),
    "metadata": top(st.dictionaries(st.text(max_size=4), json_values, max_size=2)),
    "previous_response_id": top(st.text(max_size=6)),
    "conversation": top(st.text(max_size=6)),
    "parallel_tool_calls": top(st.booleans()),
})  # fmt: skip


@FUZZ
@given(body=perturbed(responses_body), path=st.sampled_from(["/v1/responses", "/v1/responses/input_tokens"]))
def test_fuzz_responses(http, body, path):
    check(http.post(path, json=body), anthropic=False)


@settings(FUZZ, max_examples=100)
@given(items=maybe(st.lists(responses_item, max_size=3)), more=maybe(st.lists(responses_item, max_size=3)),
       metadata=maybe(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
       query=st.dictionaries(st.sampled_from(["limit", "order", "after", "include"]), st.text(max_size=4), max_size=3))
def test_fuzz_conversations(http, items, more, metadata, query):
    r = http.post("/v1/conversations", json={"items": items, "metadata": metadata})
    check(r, anthropic=False)
    if r.status_code != 200:
        return
    conv = r.json()["id"]
    check(http.post(f"/v1/conversations/{conv}/items", json={"items": more}), anthropic=False)
    check(http.get(f"/v1/conversations/{conv}/items", params=query), anthropic=False)
    check(http.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": conv}), anthropic=False)
    assert http.delete(f"/v1/conversations/{conv}").status_code == 200


# NaN and Infinity anywhere: Python's json module reads them, nothing may echo them
non_finite = st.recursive(st.sampled_from([float("nan"), float("inf"), float("-inf"), 1.5, "x"]),
                          lambda c: st.lists(c, min_size=1, max_size=2) | st.dictionaries(st.text(max_size=3), c,
                                                                                          min_size=1, max_size=2),
                          max_leaves=3)  # fmt: skip
BODIES = {"/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True},
          "/v1/completions": {"model": MODEL, "prompt": "hi"},
          "/v1/messages": {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                           "stream": True},
          "/v1/responses": {"model": MODEL, "input": "hi", "stream": True},
          "/v1/conversations": {"items": []},
          "/tokenize": {"model": MODEL, "prompt": "hi"}}  # fmt: skip


@settings(FUZZ, max_examples=60)
@given(path=st.sampled_from(sorted(BODIES)), key=st.sampled_from(["metadata", "tools", "temperature", "extra"]),
       value=non_finite)
def test_fuzz_nan_and_infinity(http, path, key, value):
    body = json.dumps({**BODIES[path], key: value}, allow_nan=True)
    r = http.post(path, content=body.encode(), headers={"content-type": "application/json"})
    check(r, anthropic=path == "/v1/messages")
    if "NaN" in body or "Infinity" in body:
        assert r.status_code == 400, r.text
