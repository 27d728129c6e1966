"""OpenAI Conversations API end to end with the `openai` SDK over the scripted engine: a conversation's items, a
Responses request continuing it (its input and output added after), items listed, fetched and deleted, 404s and
400s in OpenAI's shape."""

from __future__ import annotations

import httpx
import openai
import pytest
from server_live import MODEL, prompt_of
from server_scripts import AFTER_TOOL, GREETING, WEATHER_TOOL

from hinfer.server.conversations_store import ConversationStore
from hinfer.server.item_pages import listed_item
from hinfer.server.responses_store import size_of

ANSWER = GREETING.split("\n\n", 1)[1]
TOOLS = [{"type": "function", **WEATHER_TOOL["function"]}]


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0, timeout=30)


def test_responses_continue_a_conversation(client, engine):
    conv = client.conversations.create(items=[{"role": "system", "content": "Be kind."},
                                              {"type": "message", "role": "user", "content": "My name is Ada."}],
                                       metadata={"topic": "intro"})
    assert conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "intro"}
    r = client.responses.create(model=MODEL, input="[[greet]]", conversation=conv.id)
    assert r.output_text == ANSWER and r.conversation.id == conv.id
    p = prompt_of(engine)
    assert p.startswith("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nMy name is Ada.<|im_end|>")
    items = client.conversations.items.list(conv.id, order="asc")
    types = [(i.type, getattr(i, "role", None)) for i in items.data]
    assert types == [("message", "system"), ("message", "user"), ("message", "user"), ("reasoning", None),
                     ("message", "assistant")]  # fmt: skip
    assert items.data[2].content[0].text == "[[greet]]" and items.data[-1].id == r.output[-1].id
    assert all(i.id for i in items.data) and not items.has_more
    # the next turn sees the whole of it: the earlier answer included
    client.responses.create(model=MODEL, input=[{"role": "user", "content": "[[nothink]] again"}],
                            conversation={"id": conv.id})
    assert f"<|im_start|>assistant\n{ANSWER}<|im_end|>" in prompt_of(engine)
    assert len(client.conversations.items.list(conv.id, limit=100).data) == 7


def test_items_tool_round_trip_and_pages(client, engine):
    conv = client.conversations.create()
    r = client.responses.create(model=MODEL, input="[[weather]]", tools=TOOLS, conversation=conv.id, store=False)
    call = r.output[-1]
    added = client.conversations.items.create(conv.id, items=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C [[after_tool]]"}])
    assert added.data[0].type == "function_call_output" and added.data[0].id
    r2 = client.responses.create(model=MODEL, input=[], conversation=conv.id, tools=TOOLS)
    assert r2.output_text == AFTER_TOOL.split("\n\n", 1)[1]
    newest = client.conversations.items.list(conv.id, limit=2)  # newest first by default
    assert newest.has_more and [i.type for i in newest.data] == ["message", "reasoning"]
    after = client.conversations.items.list(conv.id, limit=100, after=newest.last_id)
    assert after.data[0].type == "function_call_output"
    got = client.conversations.items.retrieve(call.id, conversation_id=conv.id)
    assert got.type == "function_call" and got.call_id == call.call_id
    left = client.conversations.items.delete(call.id, conversation_id=conv.id)
    assert left.id == conv.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(call.id, conversation_id=conv.id)
    assert client.conversations.update(conv.id, metadata={"k": "v"}).metadata == {"k": "v"}
    assert client.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="hi", conversation=conv.id)


def test_bad_items_are_400_and_change_nothing(client, base_url):
    conv = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    with httpx.Client(base_url=base_url, timeout=30) as http:
        r = http.post(f"/v1/conversations/{conv.id}/items", json={"items": [
            {"role": "user", "content": "ok"}, {"type": "hologram"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "items.1.type"
        r = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "x"}] * 21})
        assert r.status_code == 400 and r.json()["error"]["param"] == "items"
        r = http.post("/v1/responses", json={"model": MODEL, "input": "hi", "conversation": conv.id,
                                             "previous_response_id": "resp_1"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "conversation"
    assert len(client.conversations.items.list(conv.id).data) == 1  # nothing added by the refused calls


def test_a_full_conversation_takes_no_more(engine, tokenizer):
    """Past its share of the store a conversation takes no more items (a 400, nothing added), and a response
    continuing it is refused before it runs: memory stays bounded however long a client keeps adding."""
    from server_live import live_server

    from hinfer.server import create_app

    app = create_app(engine, tokenizer, model_name=MODEL)
    app.state.hinfer.conversations.max_conversation_chars = 400
    with live_server(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        conv = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "x" * 200}]}).json()
        r = http.post(f"/v1/conversations/{conv['id']}/items", json={"items": [{"role": "user", "content": "y" * 300}]})
        assert r.status_code == 400 and "is full" in r.json()["error"]["message"]
        assert len(http.get(f"/v1/conversations/{conv['id']}/items").json()["data"]) == 1
        assert http.post("/v1/responses", json={"model": MODEL, "input": "[[greet]]", "conversation": conv["id"],
                                                "max_output_tokens": 200}).status_code == 200  # fits: it runs
        r = http.post("/v1/responses", json={"model": MODEL, "input": "[[greet]]", "conversation": conv["id"]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "conversation"  # the answer made it full


def test_the_store_keeps_its_character_bound_through_adds_and_deletes():
    store = ConversationStore(max_entries=10, max_chars=3 * size_of([listed_item(_text_item(0))]) + 50)
    convs = [store.create([_text_item(i)], None) for i in range(3)]
    one = store.chars(convs[0].id)
    assert one > 0 and len(store) == 3
    assert store.delete_item(convs[1].id, convs[1].items[0]["id"]) and store.chars(convs[1].id) == 0
    assert store.delete(convs[2].id) and not store.delete(convs[2].id)
    # two freed items' room: two more fit beside the first (made the most recent by a get)
    more = [store.create([_text_item(10 + i)], None) for i in range(2)]
    assert len(store) == 4 and store.get(convs[0].id) is not None  # the get makes it the most recent
    store.create([_text_item(20)], None)  # over by one item: the emptied conversation goes, then the next oldest
    assert store.get(convs[1].id) is None and store.get(more[0].id) is None and len(store) == 3
    assert store.get(convs[0].id) is not None and store.get(more[1].id) is not None


def _text_item(i: int) -> dict:
    return {"type": "message", "role": "user", "content": f"item number {i:04d} " + "x" * 40}
