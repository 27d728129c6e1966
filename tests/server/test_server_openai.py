"""OpenAI dialect end to end: the official `openai` SDK against a live server over a scripted engine."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from server_live import MODEL
from server_scripts import (
    AFTER_TOOL,
    PATCH,
    TIME_TOOL,
    WEATHER_ARGS,
    WEATHER_TOOL,
)


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)


def user(text):
    return [{"role": "user", "content": text}]


def collect(stream):
    """Fold a chat stream: reasoning, content, tool calls by index, finish reason, usage, last chunk extras."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None, "usage": None, "chunks": []}
    for ch in stream:
        out["chunks"].append(ch)
        if ch.usage is not None:
            out["usage"] = ch.usage
        for c in ch.choices:
            d = c.delta
            out["reasoning"] += getattr(d, "reasoning_content", None) or ""
            out["content"] += d.content or ""
            for tc in d.tool_calls or []:
                e = out["calls"].setdefault(tc.index, {"id": None, "name": None, "args": ""})
                if tc.id:
                    assert e["id"] is None, "the id comes once, in the first delta of a call"
                    e["id"] = tc.id
                if tc.function and tc.function.name:
                    e["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    assert e["name"], "name must come before arguments"
                    e["args"] += tc.function.arguments
            if c.finish_reason:
                out["finish"] = c.finish_reason
    return out


def test_chat_reasoning_and_usage(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("hi [[greet]]"))
    m = r.choices[0].message
    assert m.content == "Hello! How can I help you today?"
    assert m.reasoning_content == "The user greets me. I should greet them back."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert 0 < r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens
    assert r.model == MODEL and r.id.startswith("chatcmpl-")
    t = r.model_extra["timings"]
    assert {"queue_s", "prefill_s", "decode_s", "per_token_s", "total_s", "ttft_s"} <= set(t)
    # Thinking on by default: the prompt ends inside <think>.
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


def test_chat_stream_matches_nonstream(client):
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), stream=True))
    assert s["content"] == "Hello! How can I help you today?"
    assert s["reasoning"] == "The user greets me. I should greet them back."
    assert s["finish"] == "stop"
    assert s["usage"] is None  # not asked for
    first = s["chunks"][0].choices[0].delta
    assert first.role == "assistant"
    assert "timings" in s["chunks"][-1].model_extra


def test_stream_include_usage(client):
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), stream=True,
                                               stream_options={"include_usage": True}))
    last = s["chunks"][-1]
    assert last.choices == [] and last.usage.completion_tokens > 0
    assert last.usage.completion_tokens_details.reasoning_tokens > 0


def test_enable_thinking_false(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("[[nothink]]"),
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    m = r.choices[0].message
    assert m.content == "Hello! How can I help you today?"
    assert getattr(m, "reasoning_content", None) is None
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert prompt.endswith("<think>\n\n</think>\n\n")


def test_reasoning_effort(client, engine):
    client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), reasoning_effort="low")
    sp = engine.requests[-1].sampling
    assert sp.thinking_budget == 1024 and sp.think_end_token_id == engine.tokenizer.think_end_id
    client.chat.completions.create(model=MODEL, messages=user("[[nothink]]"), reasoning_effort="none")
    assert engine.requests[-1].sampling.thinking_budget is None
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert prompt.endswith("</think>\n\n")


def test_tool_call_typed_args(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("weather? [[weather]]"), tools=[WEATHER_TOOL])
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content == "Let me check that."
    assert c.message.reasoning_content.startswith("The user wants the weather")
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    # The tools reached the template.
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "<tools>" in prompt and '"get_weather"' in prompt


def test_tool_call_streaming(client):
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=[WEATHER_TOOL],
                                               stream=True))
    assert s["finish"] == "tool_calls"
    assert s["content"] == "Let me check that."
    (call,) = s["calls"].values()
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    assert json.loads(call["args"]) == WEATHER_ARGS
    # Arguments stream in several pieces (one per parameter), not in one lump at the end.
    arg_chunks = [ch for ch in s["chunks"] for c in ch.choices for tc in (c.delta.tool_calls or [])
                  if tc.function and tc.function.arguments]
    assert len(arg_chunks) >= 3


def test_parallel_tool_calls_and_fallback_to_string(client):
    for stream in (False, True):
        if stream:
            s = collect(client.chat.completions.create(model=MODEL, messages=user("[[parallel]]"),
                                                       tools=[WEATHER_TOOL, TIME_TOOL], stream=True))
            calls = [(c["name"], json.loads(c["args"]), c["id"]) for _, c in sorted(s["calls"].items())]
            finish, content = s["finish"], s["content"]
        else:
            r = client.chat.completions.create(model=MODEL, messages=user("[[parallel]]"),
                                               tools=[WEATHER_TOOL, TIME_TOOL])
            calls = [(c.function.name, json.loads(c.function.arguments), c.id) for c in r.choices[0].message.tool_calls]
            finish, content = r.choices[0].finish_reason, r.choices[0].message.content or ""
        assert finish == "tool_calls" and content == ""
        assert [(n, a) for n, a, _ in calls] == [
            ("get_weather", {"city": "Paris", "days": "not a number"}),  # integer conversion failed: the text
            ("get_time", {"zone": "Asia/Tokyo"}),
        ]
        assert calls[0][2] != calls[1][2]


def test_parallel_tool_calls_false_keeps_the_first_call(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("[[parallel]]"), tools=[WEATHER_TOOL, TIME_TOOL],
                                       parallel_tool_calls=False)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]
    assert "Call at most one function per answer." in engine.tokenizer.decode(engine.requests[-1].prompt_token_ids)
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[parallel]]"),
                                               tools=[WEATHER_TOOL, TIME_TOOL], parallel_tool_calls=False,
                                               stream=True))
    assert [c["name"] for c in s["calls"].values()] == ["get_weather"] and s["finish"] == "tool_calls"


def test_unknown_function_and_malformed_call_are_text(client):
    r = client.chat.completions.create(model=MODEL, messages=user("[[unknown_tool]]"), tools=[WEATHER_TOOL])
    c = r.choices[0]
    assert c.finish_reason == "stop" and not c.message.tool_calls
    assert "<function=launch_rockets>" in c.message.content
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[malformed]]"), tools=[WEATHER_TOOL],
                                               stream=True))
    assert s["finish"] == "stop" and not s["calls"]
    assert s["content"] == "Sure: <tool_call>\nthis is not a call\n</tool_call> done"


def test_tool_choice_none_leaves_text_and_hides_tools(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=[WEATHER_TOOL],
                                       tool_choice="none")
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert "<tool_call>" in r.choices[0].message.content
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "<tools>" not in prompt


def test_tool_choice_required_and_named(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=[WEATHER_TOOL, TIME_TOOL],
                                       tool_choice="required")
    assert r.choices[0].message.tool_calls
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "You must answer by calling one or more of the functions" in prompt
    r = client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=[WEATHER_TOOL, TIME_TOOL],
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert '"get_time"' in prompt and "calling the function get_weather" in prompt  # every tool shown


def test_tool_choice_allowed_tools(client, engine):
    """allowed_tools: every tool stays shown (the prompt's tool list unchanged), calls only to the allowed ones: a
    call of another stays text under auto; required is grammar-held to the allowed set. Names not among the tools,
    or none, are a 400."""
    tools = [WEATHER_TOOL, TIME_TOOL]

    def allowed(mode, *names):
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
            {"type": "function", "function": {"name": n}} for n in names]}}

    r = client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=tools,
                                       tool_choice=allowed("auto", "get_time"))
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert "<function=get_weather>" in r.choices[0].message.content
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert '"get_weather"' in prompt and "you may call only these: get_time." in prompt
    r = client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=tools,
                                       tool_choice=allowed("required", "get_weather"))
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    so = engine.requests[-1].sampling.structured
    assert [t["function"]["name"] for t in so.tools] == ["get_weather"] and so.tool_name is None
    for bad in (allowed("auto", "launch_rockets"), allowed("auto")):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=MODEL, messages=user("[[weather]]"), tools=tools, tool_choice=bad)


# a freeform (custom) tool in the chat shape: OpenAI's GPT-5 custom tools, as Responses' apply_patch
CHAT_PATCH_TOOL = {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit files with a patch.",
                   "format": {"type": "grammar", "grammar": {"syntax": "lark",
                                                             "definition": 'start: "*** Begin Patch" LF hunk+'}}}}


def test_custom_tools(client, engine):
    """A custom tool is shown as a function of one string parameter carrying its grammar (as in the Responses API);
    its call comes back as a `custom` tool call whose input is the raw text, streamed as one delta when the call
    ends; a history carrying it renders the call as written; a named custom choice is held to its grammar."""
    r = client.chat.completions.create(model=MODEL, messages=user("[[patch]]"), tools=[WEATHER_TOOL, CHAT_PATCH_TOOL])
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls" and call.type == "custom"
    assert call.custom.name == "apply_patch" and call.custom.input == PATCH
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "must follow this lark grammar" in prompt and "hunk+" in prompt
    deltas = [c.choices[0].delta.model_dump(exclude_none=True) for c in client.chat.completions.create(
        model=MODEL, messages=user("[[patch]]"), tools=[CHAT_PATCH_TOOL], stream=True) if c.choices]
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert calls[0]["type"] == "custom" and calls[0]["custom"] == {"name": "apply_patch", "input": ""}
    assert "".join(tc.get("custom", {}).get("input", "") for tc in calls) == PATCH
    history = [*user("[[patch]]"), {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": "Done [[after_tool]]"}]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=[CHAT_PATCH_TOOL])
    assert r.choices[0].message.content == AFTER_TOOL.split("\n\n", 1)[1]
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert f"<function=apply_patch>\n<parameter=input>\n{PATCH}\n</parameter>" in prompt
    r = client.chat.completions.create(model=MODEL, messages=user("[[patch]]"), tools=[WEATHER_TOOL, CHAT_PATCH_TOOL],
                                       tool_choice={"type": "custom", "custom": {"name": "apply_patch"}})
    assert r.choices[0].message.tool_calls[0].custom.input == PATCH
    so = engine.requests[-1].sampling.structured
    assert so.tool_name == "apply_patch" and so.tool_grammars["apply_patch"]["definition"].startswith('start: "***')


def test_tool_results_in_history(client, engine):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "need the tool",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C sunny [[after_tool]]"},
    ]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    assert r.choices[0].message.content == AFTER_TOOL.split("\n\n", 1)[1]
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n1\n</parameter>" in prompt
    assert "<tool_response>\n18C sunny [[after_tool]]\n</tool_response>" in prompt
    assert "<think>\nneed the tool\n</think>" in prompt  # reasoning after the last user turn is kept
    assert prompt.index("You are terse.") > prompt.index("</tools>")


def test_text_content_parts_and_developer_role(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "[[gr"}, {"type": "text", "text": "eet]]"}]},
    ])
    assert r.choices[0].message.content == "Hello! How can I help you today?"
    prompt = engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_stop_sequences_and_finish_length(client):
    r = client.chat.completions.create(model=MODEL, messages=user("[[stop]]"), stop=["STOP"])
    assert r.choices[0].message.content == "one two three " and r.choices[0].finish_reason == "stop"
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[stop]]"), stop="STOP", stream=True))
    assert s["content"] == "one two three "
    r = client.chat.completions.create(model=MODEL, messages=user("[[long]]"), max_completion_tokens=12)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12


def test_sampling_fields_reach_the_engine(client, engine):
    client.chat.completions.create(
        model=MODEL, messages=user("[[greet]]"), temperature=0.3, top_p=0.9, seed=7, presence_penalty=0.5,
        frequency_penalty=0.25, logit_bias={"15": 2.0}, max_tokens=50,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "stop_token_ids": [13]})
    sp = engine.requests[-1].sampling
    assert (sp.temperature, sp.top_p, sp.top_k, sp.min_p, sp.seed) == (0.3, 0.9, 20, 0.05, 7)
    assert (sp.presence_penalty, sp.frequency_penalty, sp.repetition_penalty) == (0.5, 0.25, 1.1)
    assert sp.logit_bias == {15: 2.0} and sp.max_tokens == 50 and sp.stop_token_ids == [13]


def test_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens  # every token, the closing <|im_end|> included
    assert lp[0].logprob == -0.25 and len(lp[0].top_logprobs) == 3
    assert lp[0].top_logprobs[0].token == lp[0].token and isinstance(lp[0].bytes, list)
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), logprobs=True, stream=True))
    n = sum(len(c.logprobs.content) for ch in s["chunks"] for c in ch.choices if c.logprobs)
    assert n == len(lp)


def test_unicode_stream(client):
    s = collect(client.chat.completions.create(model=MODEL, messages=user("[[unicode]]"), stream=True))
    assert s["content"] == "Héllo wörld — 你好 🌍!"


def test_completions(client, engine):
    r = client.completions.create(model=MODEL, prompt="Once upon a time [[greet]]", max_tokens=5, logprobs=2)
    c = r.choices[0]
    assert c.finish_reason == "length" and r.usage.completion_tokens == 5
    assert c.text.startswith("The user")  # raw: no template, no reasoning split
    assert len(c.logprobs.tokens) == 5 and len(c.logprobs.top_logprobs[0]) == 2
    assert engine.requests[-1].prompt_token_ids == engine.tokenizer.encode("Once upon a time [[greet]]")
    r = client.completions.create(model=MODEL, prompt="[[nothink]]", max_tokens=100, echo=True)
    assert r.choices[0].text == "[[nothink]]Hello! How can I help you today?" and r.choices[0].finish_reason == "stop"
    ids = engine.tokenizer.encode("[[stop]]")
    chunks = list(client.completions.create(model=MODEL, prompt=ids, stream=True, stop=["STOP"], max_tokens=100,
                                            stream_options={"include_usage": True}))
    text = "".join(c.text for ch in chunks for c in ch.choices)
    assert text.endswith("one two three ") and "STOP" not in text
    assert chunks[-1].usage.completion_tokens > 0


def test_completions_fill_in_the_middle(client, engine):
    # suffix: <|fim_prefix|> prompt <|fim_suffix|> suffix <|fim_middle|>, the model writes the middle
    tok = engine.tokenizer
    client.completions.create(model=MODEL, prompt="def f(x):\n    [[nothink]]", suffix="\n    return y\n", max_tokens=20)
    ids = engine.requests[-1].prompt_token_ids
    want = [tok.token_to_id("<|fim_prefix|>"), *tok.encode("def f(x):\n    [[nothink]]"), tok.token_to_id("<|fim_suffix|>"),
            *tok.encode("\n    return y\n"), tok.token_to_id("<|fim_middle|>")]  # fmt: skip
    assert ids == want


def test_models(client, base_url):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL, "alias-model"]
    assert client.models.retrieve(MODEL).id == MODEL
    r = client.chat.completions.create(model="alias-model", messages=user("[[greet]]"))
    assert r.model == "alias-model"
    assert httpx.get(base_url + "/v1/models/nope").status_code == 404


def test_request_id_echo_and_generation(base_url):
    body = {"model": MODEL, "messages": user("[[greet]]")}
    r = httpx.post(base_url + "/v1/chat/completions", json=body, headers={"x-request-id": "my-id-123"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "my-id-123"
    r = httpx.post(base_url + "/v1/chat/completions", json=body)
    assert r.headers["x-request-id"].startswith("req-")
    r = httpx.post(base_url + "/v1/chat/completions", json=body, headers={"x-request-id": "bad id\twith space"})
    assert r.headers["x-request-id"].startswith("req-")


def test_health_and_metrics(base_url):
    h = httpx.get(base_url + "/health").json()
    assert h["status"] == "ok" and h["model"] == MODEL and h["lanes_total"] == 4
    text = httpx.get(base_url + "/metrics").text
    for name in ("hinfer_requests_total", "hinfer_prompt_tokens_total", "hinfer_completion_tokens_total",
                 "hinfer_engine_queue_depth", "hinfer_engine_lanes_busy", "hinfer_time_to_first_token_seconds_bucket",
                 "hinfer_request_latency_seconds_count"):
        assert name in text
    assert 'endpoint="/v1/chat/completions",status="200"' in text
    for line in text.splitlines():  # every sample line is `name{labels} number`
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_preserve_thinking_and_template_kwargs(client, engine):
    history = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer one", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "[[greet]]"},
    ]
    client.chat.completions.create(model=MODEL, messages=history)
    assert "old thoughts" not in engine.tokenizer.decode(engine.requests[-1].prompt_token_ids)
    client.chat.completions.create(model=MODEL, messages=history,
                                   extra_body={"chat_template_kwargs": {"preserve_thinking": True}})
    assert "<think>\nold thoughts\n</think>" in engine.tokenizer.decode(engine.requests[-1].prompt_token_ids)


def test_huge_top_k_means_no_top_k(client, engine):
    client.chat.completions.create(model=MODEL, messages=user("[[greet]]"), extra_body={"top_k": 10**15})
    assert engine.requests[-1].sampling.top_k == 0


def _prompt(engine) -> str:
    return engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)


def test_continue_final_message(client, engine):
    # vLLM's extension: the final assistant message comes off and the answer goes on from it, as the template
    # would have written it: thinking on, its reasoning, </think> and its content (the text that follows is
    # answer); thinking off, its content after the empty think block.
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    msgs = user("[[nothink]]") + [{"role": "assistant", "content": "Sure:", "reasoning_content": "\nPlan.\n"}]
    m = client.chat.completions.create(model=MODEL, messages=msgs, extra_body=extra).choices[0].message
    assert m.content == "Hello! How can I help you today?" and getattr(m, "reasoning_content", None) is None
    assert _prompt(engine).endswith("<|im_start|>assistant\n<think>\nPlan.\n</think>\n\nSure:")
    msgs = user("[[nothink]]") + [{"role": "assistant", "content": "Sure:"}]
    client.chat.completions.create(model=MODEL, messages=msgs, extra_body={
        **extra, "chat_template_kwargs": {"enable_thinking": False}})
    assert _prompt(engine).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nSure:")
    # a final message with reasoning only: the reasoning goes on (the answer opens inside the think block)
    msgs = user("[[greet]]") + [{"role": "assistant", "content": "", "reasoning_content": "Hmm."}]
    m = client.chat.completions.create(model=MODEL, messages=msgs, extra_body=extra).choices[0].message
    assert m.reasoning_content == "The user greets me. I should greet them back."
    assert m.content == "Hello! How can I help you today?"
    assert _prompt(engine).endswith("<|im_start|>assistant\n<think>\nHmm.")


@pytest.mark.parametrize(("messages", "extra", "param"), [
    (user("x"), {"continue_final_message": True}, "messages"),
    (user("x") + [{"role": "assistant", "content": "a"}], {"continue_final_message": True,
                                                           "add_generation_prompt": True}, "continue_final_message"),
    (user("x"), {"add_generation_prompt": False}, "add_generation_prompt"),
    (user("x") + [{"role": "assistant", "content": "a", "reasoning_content": "r"}],
     {"continue_final_message": True, "chat_template_kwargs": {"enable_thinking": False}}, "messages.1.reasoning_content"),
    (user("x") + [{"role": "assistant", "content": "a"}],
     {"continue_final_message": True, "response_format": {"type": "json_object"}}, "response_format"),
])  # fmt: skip
def test_continue_final_message_refused(client, engine, messages, extra, param):
    n = len(engine.requests)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=messages, extra_body=extra)
    assert e.value.body["param"] == param and len(engine.requests) == n
