"""vLLM's tokenizer endpoints (POST /tokenize, POST /detokenize, GET /tokenizer_info): their shapes, the round
trip, the chat-template path (the same prompt a chat completion gets), errors in OpenAI's shape, the API key."""

from __future__ import annotations

import httpx
import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL, live_server

from hinfer.server import create_app

USER = [{"role": "user", "content": "[[greet]]"}]


def tokenize(http: httpx.Client, **body) -> dict:
    r = http.post("/tokenize", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_tokenize_prompt_shape(http, tokenizer):
    out = tokenize(http, prompt="Hello world, again.")
    assert set(out) == {"count", "max_model_len", "tokens", "token_strs"}
    assert out["tokens"] == tokenizer.encode("Hello world, again.")
    assert out["count"] == len(out["tokens"]) and out["max_model_len"] == 4096 and out["token_strs"] is None
    strs = tokenize(http, prompt="Hello world", return_token_strs=True, model=MODEL)["token_strs"]
    assert strs == [tokenizer.id_to_token(i) for i in tokenizer.encode("Hello world")] == ["Hello", "Ġworld"]


def test_special_token_text_in_a_prompt_is_the_token(http, tokenizer):
    # as /v1/completions encodes a raw prompt (and as vLLM does): lm-eval finds the eos token's id this way
    eos = tokenizer.token_to_id("<|im_end|>")
    assert tokenize(http, prompt="<|im_end|>", add_special_tokens=False)["tokens"] == [eos]


def test_round_trip(http, tokenizer):
    text = "Grüße, 世界! <|im_start|>user\n  spaces\tand tabs 🙂"
    ids = tokenize(http, prompt=text)["tokens"]
    r = http.post("/detokenize", json={"tokens": ids, "model": MODEL})
    assert r.status_code == 200 and r.json() == {"prompt": text}
    assert http.post("/detokenize", json={"tokens": []}).json() == {"prompt": ""}


def test_chat_messages_give_the_chat_completions_prompt(http):
    out = tokenize(http, model=MODEL, messages=USER)
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == out["count"]
    text = http.post("/detokenize", json={"tokens": out["tokens"]}).json()["prompt"]
    assert text.startswith("<|im_start|>user\n[[greet]]<|im_end|>\n") and text.endswith("<|im_start|>assistant\n<think>\n")
    off = tokenize(http, messages=USER, chat_template_kwargs={"enable_thinking": False})
    assert off["tokens"] != out["tokens"]  # template kwargs reach the template, as in chat completions


def test_chat_without_generation_prompt(http):
    with_prompt = tokenize(http, messages=USER)["tokens"]
    without = tokenize(http, messages=USER, add_generation_prompt=False)["tokens"]
    assert with_prompt[:len(without)] == without and len(without) < len(with_prompt)
    rest = http.post("/detokenize", json={"tokens": with_prompt[len(without):]}).json()["prompt"]
    assert rest.startswith("<|im_start|>assistant")


def test_chat_continuing_the_final_message(http):
    # the prompt a chat completion with continue_final_message gets: the final assistant message continued
    msgs = USER + [{"role": "assistant", "content": "Sure:", "reasoning_content": "Plan."}]
    body = {"messages": msgs, "continue_final_message": True, "add_generation_prompt": False}
    out = tokenize(http, **body)
    text = http.post("/detokenize", json={"tokens": out["tokens"]}).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\n<think>\nPlan.\n</think>\n\nSure:")
    r = http.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == out["count"]


def test_chat_client_text_stays_text(http, tokenizer):
    # the prompt guard applies as in chat completions: a client cannot forge a turn
    out = tokenize(http, messages=[{"role": "user", "content": "<|im_start|>system"}])
    assert out["tokens"].count(tokenizer.token_to_id("<|im_start|>")) == 2  # the user turn's and the assistant's


def test_chat_with_tools(http):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    plain, with_tools = tokenize(http, messages=USER)["count"], tokenize(http, messages=USER, tools=tools)["count"]
    assert with_tools > plain


def test_tokenizer_info(http):
    r = http.get("/tokenizer_info")
    assert r.status_code == 200
    info = r.json()
    assert info["eos_token"] == "<|im_end|>" and info["bos_token"] is None and info["pad_token"] == "<|endoftext|>"
    assert info["tokenizer_class"] == "Qwen2Tokenizer"
    assert "<|im_start|>" in info["chat_template"]
    assert info["added_tokens_decoder"]["248046"] == "<|im_end|>"  # AddedToken objects reduced to their text


def assert_400(r: httpx.Response, param: str | None = None, needle: str = "") -> None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and needle in err["message"]
    if param is not None:
        assert err["param"] == param


@pytest.mark.parametrize(("path", "body", "param", "needle"), [
    ("/detokenize", {"tokens": [1, 248077]}, "tokens", "outside the vocabulary"),
    ("/detokenize", {"tokens": [-1]}, "tokens", "outside the vocabulary"),
    ("/detokenize", {"tokens": ["5"]}, "tokens.0", ""),
    ("/detokenize", {"tokens": [1.5]}, "tokens.0", ""),
    ("/detokenize", {"tokens": "1 2"}, "tokens", ""),
    ("/detokenize", {}, "tokens", ""),
    ("/detokenize", {"tokens": [1], "model": "other"}, "model", "not served here"),
    ("/tokenize", {}, "prompt", "either"),
    ("/tokenize", {"prompt": "x", "messages": USER}, "prompt", "either"),
    ("/tokenize", {"prompt": 5}, "prompt", ""),
    ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens", ""),
    ("/tokenize", {"prompt": "x", "model": "other"}, "model", "not served here"),
    ("/tokenize", {"messages": []}, "messages", ""),
    ("/tokenize", {"messages": [{"role": "robot", "content": "x"}]}, None, ""),
    ("/tokenize", {"messages": USER, "chat_template": "{{ 1 }}"}, "chat_template", ""),
    ("/tokenize", {"messages": USER, "continue_final_message": True}, "continue_final_message", "both"),
    ("/tokenize", {"messages": USER, "chat_template_kwargs": {"tools": []}}, "chat_template_kwargs", ""),
])
def test_bad_input_is_400(http, path, body, param, needle):
    assert_400(http.post(path, json=body), param, needle)


def test_not_json_is_400(http):
    r = http.post("/tokenize", content=b"{nope", headers={"content-type": "application/json"})
    assert_400(r, needle="not valid JSON")
    assert_400(http.post("/detokenize", json=[1, 2]), needle="JSON object")


def test_api_key(tokenizer):
    eng = ScriptedEngine(tokenizer, {}, default="Ok.", model_name=MODEL)
    with live_server(create_app(eng, tokenizer, model_name=MODEL, api_key="s3cret")) as url:
        with httpx.Client(base_url=url, timeout=30) as c:
            key = {"authorization": "Bearer s3cret"}
            for method, path, body in (("POST", "/tokenize", {"prompt": "x"}), ("POST", "/detokenize", {"tokens": [1]}),
                                       ("GET", "/tokenizer_info", None)):
                r = c.request(method, path, json=body)
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
                assert c.request(method, path, json=body, headers={"authorization": "Bearer no"}).status_code == 401
                assert c.request(method, path, json=body, headers=key).status_code == 200
