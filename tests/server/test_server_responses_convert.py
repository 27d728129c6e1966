"""Responses input items -> chat messages, without a server: how turns are grouped and what is read from where."""

from __future__ import annotations

import pytest

from hinfer.server.errors import APIError
from hinfer.server.responses_convert import REASONING, convert_items, input_items
from hinfer.server.responses_tools import CUSTOM_INPUT


def test_an_assistant_turn_gathers_reasoning_message_and_calls():
    items = [
        {"role": "developer", "content": "Dev."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Calling."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": ""},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [
            {"type": "input_text", "text": "two "}, {"type": "input_image", "image_url": "data:..."}]},
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
    ]
    msgs = convert_items(items, "Base.")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert msgs[0]["content"] == "Base.\n\nDev."
    a = msgs[2]
    assert (a["reasoning_content"], a["content"]) == ("think", "Calling.")
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in a["tool_calls"]] == [
        ("c1", "f", {"a": 1}), ("c2", "g", {})]
    assert msgs[4]["content"].startswith("two [input_image omitted: this server reads images in user messages only")
    assert msgs[5]["tool_calls"][0]["id"] == "c3" and msgs[5]["content"] == ""


def test_reasoning_is_read_from_content_then_our_blob_then_summary():
    blob = REASONING.encode("secret thoughts é")
    assert REASONING.decode(blob) == "secret thoughts é" and REASONING.decode("gAAAA-openai-blob") is None
    assert REASONING.decode("hinfer-reasoning:not base64!") is None
    for item, want in [
        ({"type": "reasoning", "summary": [], "encrypted_content": blob}, "secret thoughts é"),
        ({"type": "reasoning", "summary": [{"type": "summary_text", "text": "s1"},
                                           {"type": "summary_text", "text": "s2"}]}, "s1\n\ns2"),
        ({"type": "reasoning", "summary": [], "encrypted_content": "not ours"}, None),
    ]:
        msgs = convert_items([{"role": "user", "content": "q"}, item,
                              {"role": "assistant", "content": "a"}], None)
        assert msgs[-1].get("reasoning_content") == want and msgs[-1]["content"] == "a"


def test_consecutive_assistant_messages_are_separate_turns():
    msgs = convert_items([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                          {"role": "assistant", "content": "a2"}], None)
    assert [m["content"] for m in msgs] == ["q", "a1", "a2"]


def test_input_string_and_errors():
    assert input_items("hi") == [{"type": "message", "role": "user", "content": "hi"}]
    assert input_items("") == []
    with pytest.raises(APIError) as e:
        convert_items([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], None)
    assert "'input_file' content parts are not supported" in e.value.message and e.value.param == "input.0.content.0"
    with pytest.raises(APIError) as e:
        convert_items([{"role": "assistant", "content": [{"type": "input_image", "image_url": "data:,"}]}], None)
    assert "user messages only" in e.value.message and e.value.param == "input.0.content.0"


def test_user_images_become_template_items_in_order():
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    images: list = []
    msgs = convert_items([{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": url},
        {"type": "input_image", "image_url": {"url": url}, "detail": "high"}, {"type": "input_text", "text": "b"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "plain"}]}], None, images)  # fmt: skip
    assert msgs[0]["content"] == [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "image"},
                                  {"type": "text", "text": "b"}]  # fmt: skip
    assert msgs[1]["content"] == "plain" and [im.size for im in images] == [(40, 30), (40, 30)]


def test_custom_tool_call_items_join_the_turn():
    items = [{"role": "user", "content": "go"},
             {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
             {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}]
    msgs = convert_items(items, None)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    call = msgs[1]["tool_calls"][0]
    assert (call["id"], call["function"]["name"], call["function"]["arguments"]) == (
        "c1", "apply_patch", {CUSTOM_INPUT: "*** Begin Patch"})
    assert msgs[2]["content"] == "ok"
