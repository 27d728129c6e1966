"""Bad input, auth and engine failures: each is answered in its dialect's error shape, and the server keeps
serving afterwards."""

from __future__ import annotations

import time

import httpx
import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server

from hinfer.engine.protocol import RequestTooLargeError
from hinfer.server import create_app

CHAT = "/v1/chat/completions"
MSGS = "/v1/messages"


def wait_until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def chat(**kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "[[greet]]"}]}
    body.update(kw)
    return body


def msgs(**kw):
    body = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "[[nothink]]"}]}
    body.update(kw)
    return body


def assert_openai_error(r, status=400, code=None, needle=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code:
        assert err["code"] == code
    if needle:
        assert needle in err["message"]
    return err


def assert_anthropic_error(r, status=400, typ="invalid_request_error", needle=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == typ and body["error"]["message"]
    if needle:
        assert needle in body["error"]["message"]


OPENAI_BAD = [
    ({"model": MODEL}, "messages"),
    (chat(messages="hello"), "messages"),
    (chat(messages=[]), "messages"),
    (chat(messages=[{"role": "wizard", "content": "x"}]), "role"),
    (chat(messages=[{"content": "x"}]), "role"),
    (chat(messages=[{"role": "user", "content": 5}]), "content"),
    (chat(temperature="hot"), "temperature"),
    (chat(temperature=-1), "temperature"),
    (chat(top_p=0), "top_p"),
    (chat(max_tokens="lots"), "max_tokens"),
    (chat(max_tokens=0), "max_tokens"),
    (chat(max_tokens=-5), "max_tokens"),
    (chat(max_tokens=10**12), "max_tokens"),
    (chat(max_completion_tokens=10**30), "max_completion_tokens"),
    (chat(stream=5), "stream"),
    (chat(model="gpt-17"), "not served"),
    (chat(model=None), "model"),
    (chat(n=17), "at most 16 choices"),
    (chat(n=0), "n must be at least 1"),
    (chat(response_format={"type": "yaml"}), "response_format"),
    (chat(response_format={"type": "json_schema"}), "response_format"),
    (chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}), "response_format"),
    (chat(response_format={"type": "json_object"}, tools=[{"type": "function", "function": {"name": "a"}}],
          tool_choice="required"), "cannot be combined"),
    (chat(structured_outputs={"choice": []}), "structured_outputs"),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]),
     "not fetched"),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                                                          "iVBOR"}}]}]), "base64"),
    (chat(messages=[{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     "user messages only"),
    (chat(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]), "not supported"),
    (chat(messages=[{"role": "user", "content": [{"type": "mystery"}]}]), "unsupported content part"),
    (chat(logprobs=True, top_logprobs=50), "top_logprobs"),
    (chat(logit_bias={"abc": 1}), "logit_bias"),
    (chat(logit_bias={"99999999": 1}), "vocabulary"),
    (chat(logit_bias={"5": 1000}), "logit_bias"),
    (chat(stop_token_ids=[-1]), "vocabulary"),
    (chat(tools=[{"type": "function", "function": {"description": "no name"}}]), "name"),
    (chat(tool_choice="sometimes"), "tool_choice"),
    (chat(tool_choice="required"), "requires tools"),
    (chat(tools=[{"type": "function", "function": {"name": "a"}}],
          tool_choice={"type": "function", "function": {"name": "b"}}), "not in tools"),
    (chat(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]), "not valid JSON"),
    (chat(messages=[{"role": "system", "content": "only a system prompt"}]), "chat template"),
    (chat(messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "late"}]), "chat template"),
    (chat(reasoning_effort="extreme"), "reasoning_effort"),
    (chat(chat_template_kwargs={"enable_thinking": "yes"}), "enable_thinking"),
    (chat(messages=[{"role": "user", "content": "word " * 5000}]), "context"),
    (chat(stop=["a"] * 100), "stop"),
]


@pytest.mark.parametrize("body,needle", OPENAI_BAD, ids=[str(i) for i in range(len(OPENAI_BAD))])
def test_openai_bad_input(http, body, needle):
    err = assert_openai_error(http.post(CHAT, json=body))
    assert needle in err["message"] or needle == err["param"] or needle in (err["param"] or ""), err


def test_openai_error_codes(http):
    assert_openai_error(http.post(CHAT, json=chat(model="nope")), code="model_not_found")
    err = assert_openai_error(http.post(CHAT, json=chat(messages=[{"role": "user", "content": "word " * 5000}])),
                              code="context_length_exceeded")
    assert err["param"] == "messages"
    assert_openai_error(http.post(CHAT, content=b'{"model": "x", "messages": [', headers={"content-type":
                                                                                      "application/json"}),
                        code="invalid_json")
    assert_openai_error(http.post(CHAT, content=b'{"model": "' + MODEL.encode() + b'", "temperature": NaN, '
                                  b'"messages": [{"role": "user", "content": "x"}]}',
                                  headers={"content-type": "application/json"}))
    assert_openai_error(http.post(CHAT, content=b"not json at all"))


def test_max_tokens_over_what_the_prompt_leaves_is_clamped(http, engine):
    r = http.post(CHAT, json=chat(max_tokens=4000, messages=[{"role": "user", "content": "word " * 1000 + "[[long]]"}]))
    assert r.status_code == 200
    sp = engine.requests[-1].sampling
    assert sp.max_tokens == 4096 - len(engine.requests[-1].prompt_token_ids)


COMPLETIONS_BAD = [
    ({"model": MODEL}, "prompt"),
    ({"model": MODEL, "prompt": ""}, "empty"),
    ({"model": MODEL, "prompt": []}, "empty"),
    ({"model": MODEL, "prompt": ["a", ""]}, "prompt.1"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 0}, "only allowed with echo"),
    ({"model": MODEL, "prompt": [1, 2, 10**9]}, "vocabulary"),
    ({"model": MODEL, "prompt": "x", "suffix": "y", "echo": True}, "echo cannot be combined with suffix"),
    ({"model": MODEL, "prompt": [1, 2], "suffix": "y"}, "takes text prompts"),
    ({"model": MODEL, "prompt": "x", "best_of": 3}, "best_of"),
    ({"model": MODEL, "prompt": "x", "logprobs": 99}, "logprobs"),
    ({"model": MODEL, "prompt": ["x"] * 4, "n": 5}, "at most 16 choices"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 10**7}, "max_tokens"),
]


@pytest.mark.parametrize("body,needle", COMPLETIONS_BAD, ids=[str(i) for i in range(len(COMPLETIONS_BAD))])
def test_completions_bad_input(http, body, needle):
    err = assert_openai_error(http.post("/v1/completions", json=body))
    assert needle in err["message"] or needle in (err["param"] or ""), err


ANTHROPIC_BAD = [
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    (msgs(messages=[{"role": "tool", "content": "x"}]), "role"),
    (msgs(messages=[{"role": "system", "content": "only a system message"}]), "chat template"),
    (msgs(messages="hi"), "messages"),
    (msgs(max_tokens="many"), "max_tokens"),
    (msgs(max_tokens=10**9), "max_tokens"),
    (msgs(model="claude-opus-9"), "not served"),
    (msgs(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "x",
                                                                               "media_type": "image/png"}}]}]),
     "not valid base64"),
    (msgs(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}]),
     "not fetched"),
    (msgs(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]), "only text documents"),
    (msgs(messages=[{"role": "user", "content": [{"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]), "PDFs"),
    (msgs(messages=[{"role": "user", "content": [{"type": "audio"}]}]), "not supported"),
    (msgs(messages=[{"role": "user", "content": [{"type": "hologram"}]}]), "unsupported content block"),
    (msgs(messages=[{"role": "user", "content": [{"type": "text"}]}]), "text"),
    (msgs(messages=[{"role": "user", "content": [{"type": "tool_use", "id": "1", "name": "f", "input": {}}]}]),
     "cannot hold"),
    (msgs(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "1", "content": "r"}]}]), "belong in user"),
    (msgs(thinking={"type": "enabled"}), "budget_tokens"),
    (msgs(thinking={"type": "sometimes"}), "thinking"),
    (msgs(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "custom tools"),
    (msgs(tools=[{"name": "f", "input_schema": {}}], tool_choice={"type": "tool"}), "name"),
    (msgs(tools=[{"name": "f", "input_schema": {}}], tool_choice={"type": "tool", "name": "g"}), "not in tools"),
    (msgs(system=[{"type": "image"}]), "images"),
    (msgs(temperature=-3), "temperature"),
    (msgs(messages=[{"role": "user", "content": "word " * 5000}]), "prompt is too long"),
    (msgs(messages=[{"role": "assistant", "content": "only me"}]), "chat template"),
]


@pytest.mark.parametrize("body,needle", ANTHROPIC_BAD, ids=[str(i) for i in range(len(ANTHROPIC_BAD))])
def test_anthropic_bad_input(http, body, needle):
    r = http.post(MSGS, json=body)
    assert_anthropic_error(r)
    assert needle in r.json()["error"]["message"], r.json()


def test_anthropic_count_tokens_bad_input(http):
    assert_anthropic_error(http.post(MSGS + "/count_tokens", json={"model": MODEL}))
    assert_anthropic_error(http.post(MSGS + "/count_tokens", content=b"{{", headers={"content-type": "application/json"}))
    assert_anthropic_error(http.post(MSGS, content=b"{{", headers={"content-type": "application/json"}))


def test_unknown_paths_and_methods(http):
    assert_openai_error(http.get("/v1/nothing"), status=404)
    assert_anthropic_error(http.get(MSGS), status=405, typ="invalid_request_error")
    assert_openai_error(http.get(CHAT), status=405)


def test_a_405_lists_the_allowed_methods(http):
    r = http.request("TRACE", "/health")  # RFC 9110: a 405 carries `Allow`
    assert_openai_error(r, status=405)
    assert r.headers["allow"] == "GET"
    r = http.put("/v1/responses/resp_x")
    assert_openai_error(r, status=405)
    assert r.headers["allow"] == "DELETE, GET"  # two routes share the path
    assert_anthropic_error(r := http.get(MSGS), status=405)
    assert r.headers["allow"] == "POST"


def test_server_still_serves(http):
    assert http.get("/health").json()["status"] == "ok"
    r = http.post(CHAT, json=chat())
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    r = http.post(MSGS, json=msgs())
    assert r.status_code == 200 and r.json()["content"][0]["text"]


# -- auth -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tokenizer):
    eng = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL, api_key="s3cret", cors=["http://ui.example"])) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            yield c


def test_auth(secured):
    assert_openai_error(secured.post(CHAT, json=chat()), status=401, code="invalid_api_key")
    assert_openai_error(secured.post(CHAT, json=chat(), headers={"authorization": "Bearer wrong"}), status=401)
    assert_anthropic_error(secured.post(MSGS, json=msgs()), status=401, typ="authentication_error")
    assert_anthropic_error(secured.post(MSGS, json=msgs(), headers={"x-api-key": "nope"}), status=401,
                           typ="authentication_error", needle="invalid x-api-key")
    assert_openai_error(secured.get("/v1/models"), status=401)
    assert secured.get("/metrics").status_code == 401
    assert secured.post(CHAT, json=chat(), headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert secured.post(MSGS, json=msgs(), headers={"x-api-key": "s3cret"}).status_code == 200
    assert secured.get("/v1/models", headers={"x-api-key": "s3cret"}).status_code == 200
    assert secured.get("/health").status_code == 200  # liveness needs no key


def test_auth_with_sdks(secured):
    import anthropic
    import openai

    base = str(secured.base_url).rstrip("/")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base + "/v1", api_key="bad", max_retries=0).models.list()
    assert openai.OpenAI(base_url=base + "/v1", api_key="s3cret", max_retries=0).models.list().data
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=base, api_key="bad", max_retries=0).messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    m = anthropic.Anthropic(base_url=base, api_key="s3cret", max_retries=0).messages.create(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert m.content[0].text == "Ok."


def test_cors_preflight(secured):
    r = secured.options(CHAT, headers={"origin": "http://ui.example", "access-control-request-method": "POST",
                                       "access-control-request-headers": "authorization,content-type"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://ui.example"
    r = secured.post(CHAT, json=chat(), headers={"origin": "http://ui.example", "authorization": "Bearer s3cret"})
    assert r.headers["access-control-allow-origin"] == "http://ui.example"


# -- engine failures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight(tokenizer):
    """One lane, no queue, slow steps: the second concurrent request is refused."""
    eng = ScriptedEngine(tokenizer, {}, default="Ok.\n</think>\n\n" + "la " * 200, lanes=1, max_pending=0,
                         step_s=0.005, model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL)) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            yield c, eng


def test_queue_full_is_429(tight):
    c, eng = tight
    with c.stream("POST", CHAT, json=chat(stream=True)) as busy:
        assert busy.status_code == 200
        r = c.post(CHAT, json=chat())
        err = assert_openai_error(r, status=429, code="queue_full")
        assert "busy" in err["message"] and r.headers["retry-after"] == "1"
        assert_anthropic_error(c.post(MSGS, json=msgs()), status=429, typ="rate_limit_error", needle="busy")
    wait_until(lambda: eng.busy == 0)  # the client left the stream: the lane comes back
    assert c.post(CHAT, json=chat(max_tokens=3)).status_code == 200


def test_queue_timeout_is_429_with_its_own_message(tokenizer):
    eng = ScriptedEngine(tokenizer, {}, default="la " * 200, lanes=1, max_pending=2, pending_timeout_s=0.1,
                         step_s=0.005, model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL)) as url, httpx.Client(base_url=url) as c:
        with c.stream("POST", CHAT, json=chat(stream=True)) as busy:
            assert busy.status_code == 200
            err = assert_openai_error(c.post(CHAT, json=chat()), status=429, code="queue_timeout")
            assert "waited too long" in err["message"]
            assert_anthropic_error(c.post(MSGS, json=msgs()), status=429, typ="rate_limit_error",
                                   needle="waited too long")
    assert eng.started and eng.stopped  # the app's lifespan starts and stops the engine


def test_engine_errors(tight):
    c, eng = tight
    eng.fail_next = (0, RuntimeError("kaboom"))
    err = assert_openai_error(c.post(CHAT, json=chat()), status=500, code="internal_error")
    assert "kaboom" in err["message"]
    eng.fail_next = (0, RuntimeError("kaboom"))
    assert_anthropic_error(c.post(MSGS, json=msgs()), status=500, typ="api_error")
    eng.fail_next = (0, RequestTooLargeError("too big for the pool"))
    assert_openai_error(c.post(CHAT, json=chat()), status=400, code="context_length_exceeded")
    # Failing mid-stream: the stream carries an error event in the dialect's shape.
    eng.fail_next = (5, RuntimeError("late kaboom"))
    r = c.post(CHAT, json=chat(stream=True))
    assert r.status_code == 200 and '"error"' in r.text and "late kaboom" in r.text and r.text.endswith("[DONE]\n\n")
    eng.fail_next = (5, RuntimeError("late kaboom"))
    r = c.post(MSGS, json=msgs(stream=True))
    assert "event: error" in r.text and '"api_error"' in r.text
    # Still serving, and the lane was given back each time.
    assert c.post(CHAT, json=chat(max_tokens=3)).status_code == 200
    assert eng.busy == 0


def test_an_engine_that_can_run_no_step_is_503_and_unhealthy(http, engine):
    """A tensor-parallel rank gone: /health says so (a supervisor restarts the server), requests get a 503 in the
    dialect's shape instead of failing one by one; healthy again once the engine is (a restarted one)."""
    engine.broken = "forward: rank 1 closed its connection"
    try:
        r = http.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "error" and "rank 1" in r.json()["message"]
        err = assert_openai_error(http.post(CHAT, json=chat()), status=503, code="engine_unavailable")
        assert "restart" in err["message"]
        assert_anthropic_error(http.post(MSGS, json=msgs()), status=503, typ="overloaded_error", needle="rank 1")
    finally:
        engine.broken = None
    assert http.get("/health").json()["status"] == "ok"
    assert http.post(CHAT, json=chat(max_tokens=3)).status_code == 200

# -- unusable JSON: invalid Unicode, NaN / Infinity ---------------------------------------------------------

# Python's json module reads what JSON text cannot carry on: lone surrogates (no character, not UTF-8) and NaN /
# Infinity (no JSON number); each is a 400 naming the field, before it reaches the tokenizer or an echo
UNUSABLE_BODIES = [
    (CHAT, '{"model": "%s", "messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages.0.content"),
    (CHAT, '{"model": "%s", "messages": [{"role": "user", "content": "x"}], "stop": ["\\udfff"]}', "stop.0"),
    ("/v1/completions", '{"model": "%s", "prompt": "a\\udc00"}', "prompt"),
    (MSGS, '{"model": "%s", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", '
           '"text": "\\ud83d"}]}]}', "messages.0.content.0.text"),
    (MSGS + "/count_tokens", '{"model": "%s", "system": "\\ud800", "messages": [{"role": "user", "content": "x"}]}',
     "system"),
    ("/v1/responses", '{"model": "%s", "input": "ok", "metadata": {"k": "\\ud800"}}', "metadata.k"),
    ("/v1/responses", '{"model": "%s", "input": [{"role": "user", "content": "\\udbff"}]}', "input.0.content"),
    ("/tokenize", '{"model": "%s", "prompt": "a\\udc00"}', "prompt"),
    ("/tokenize", '{"model": "%s", "messages": [{"role": "user", "content": "\\ud800"}]}', "messages.0.content"),
    ("/v1/conversations", '{"items": [{"role": "user", "content": "\\ud800"}]}', "items.0.content"),
    ("/v1/conversations", '{"metadata": {"k": "\\udc00"}}', "metadata.k"),
    (CHAT, '{"model": "%s", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "temperature"),
    (CHAT, '{"model": "%s", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", '
           '"function": {"name": "f", "parameters": {"type": "object", "maximum": Infinity}}}]}',
     "tools.0.function.parameters.maximum"),
    (MSGS, '{"model": "%s", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "metadata": '
           '{"n": -Infinity}}', "metadata.n"),
    ("/v1/responses", '{"model": "%s", "input": "ok", "metadata": {"k": Infinity}}', "metadata.k"),
    ("/v1/responses", '{"model": "%s", "input": "ok", "stream": true, "text": {"format": {"type": "json_schema", '
                      '"name": "x", "schema": {"type": "number", "minimum": NaN}}}}', "text.format.schema.minimum"),
    ("/tokenize", '{"model": "%s", "prompt": "x", "extra": [1, NaN]}', "extra.1"),
    ("/v1/conversations", '{"items": [{"role": "user", "content": "x", "n": Infinity}]}', "items.0.n"),
]


@pytest.mark.parametrize("path,body,param", UNUSABLE_BODIES, ids=[str(i) for i in range(len(UNUSABLE_BODIES))])
def test_unusable_json_is_400_naming_the_field(http, path, body, param):
    r = http.post(path, content=body.replace("%s", MODEL).encode(), headers={"content-type": "application/json"})
    needle = f"in {param}: "  # "invalid Unicode in P: ..." or "invalid number in P: ..."
    if path.startswith(MSGS):
        assert_anthropic_error(r, needle=needle)
    else:
        assert assert_openai_error(r, needle=needle)["param"] == param


# untyped items, parts and tools (kept as raw JSON by the schemas) whose `type` is not a string
BAD_TYPE_BODIES = [
    {"input": [{"type": ["message"], "role": "user", "content": "x"}], "param": "input.0.type"},
    {"input": [{"role": "user", "content": [{"type": {"a": 1}, "text": "x"}]}], "param": "input.0.content.0.type"},
    {"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": [1]}]}],
     "param": "input.0.output.0.type"},
    {"input": "x", "tools": [{"type": {"x": 1}}], "param": "tools.0.type"},
    {"input": [{"role": "user", "content": ["text", {"type": "input_image", "image_url": "x"}]}],
     "param": "input.0.content.0"},
]


@pytest.mark.parametrize("case", BAD_TYPE_BODIES, ids=[str(i) for i in range(len(BAD_TYPE_BODIES))])
def test_responses_items_with_a_type_that_is_no_string_are_400s(http, case):
    case = dict(case)
    param = case.pop("param")
    err = assert_openai_error(http.post("/v1/responses", json={"model": MODEL, **case}))
    assert err["param"] == param
    assert http.post("/v1/responses", json={"model": MODEL, "input": "[[greet]]"}).status_code == 200


def test_a_valid_surrogate_pair_is_text(http):
    body = '{"model": "' + MODEL + '", "messages": [{"role": "user", "content": "\\ud83c\\udf0d [[greet]]"}]}'
    r = http.post(CHAT, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_invalid_utf8_bytes_are_400(http):
    body = b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "a\xff\xfeb"}]}'
    assert_openai_error(http.post(CHAT, content=body, headers={"content-type": "application/json"}))
    assert_anthropic_error(http.post(MSGS, content=body, headers={"content-type": "application/json"}))


STRICT_TYPES = [
    (CHAT, chat(max_tokens="5"), "max_tokens"),
    (CHAT, chat(max_tokens=5.0), "max_tokens"),
    (CHAT, chat(stream="yes"), "stream"),
    (CHAT, chat(stream=1), "stream"),
    (CHAT, chat(temperature="0.5"), "temperature"),
    (CHAT, chat(stream=True, stream_options={"include_usage": "true"}), "stream_options.include_usage"),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "echo": "no"}, "echo"),
    (MSGS, msgs(max_tokens="5"), "max_tokens"),
    (MSGS, msgs(stream="yes"), "stream"),
    ("/v1/responses", {"model": MODEL, "input": "x", "max_output_tokens": "5"}, "max_output_tokens"),
    ("/v1/responses", {"model": MODEL, "input": "x", "store": "false"}, "store"),
]


@pytest.mark.parametrize("path,body,param", STRICT_TYPES, ids=[str(i) for i in range(len(STRICT_TYPES))])
def test_wrong_json_types_are_400s(http, path, body, param):
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    if path == MSGS:
        assert param in r.json()["error"]["message"]
    else:
        assert r.json()["error"]["param"] == param


RESERVED_KWARGS = ["bos_token", "eos_token", "messages", "tools", "add_generation_prompt", "documents", "_secret"]


@pytest.mark.parametrize("key", RESERVED_KWARGS)
def test_chat_template_kwargs_cannot_set_reserved_variables(http, key):
    err = assert_openai_error(http.post(CHAT, json=chat(chat_template_kwargs={key: "<|im_start|>system"})))
    assert err["param"] == "chat_template_kwargs" and key in err["message"]


def test_sampling_parameter_errors_name_the_parameter(http):
    for name, value in (("temperature", 3.5e38), ("repetition_penalty", 1e-45), ("top_p", 0.0)):
        err = assert_openai_error(http.post(CHAT, json=chat(**{name: value})))
        assert err["param"] == name and name in err["message"]
    r = http.post(MSGS, json=msgs(temperature=3.5e38))
    assert_anthropic_error(r, needle="temperature")
