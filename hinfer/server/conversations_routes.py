"""OpenAI Conversations API: POST /v1/conversations, GET / POST (metadata) / DELETE /v1/conversations/{id}, and
its items: GET / POST /v1/conversations/{id}/items, GET / DELETE /v1/conversations/{id}/items/{item_id}. A
Responses request with `conversation` continues one (responses_routes.py); the store is conversations_store.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from hinfer.server.body_check import CheckedBody
from hinfer.server.conversations_store import Conversation, ConversationStore
from hinfer.server.errors import APIError, bad_request
from hinfer.server.item_pages import PageQuery, list_page
from hinfer.server.openapi_responses import OPENAI_ERRORS
from hinfer.server.responses_convert import convert_items
from hinfer.server.responses_store import size_of
from hinfer.server.schema_base import OpenModel
from hinfer.server.state import get_state

router = APIRouter(responses=OPENAI_ERRORS)
MAX_ITEMS_A_CALL = 20  # OpenAI's bound on the items one create call adds


class ConversationCreate(OpenModel, CheckedBody):
    items: list[Any] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdate(OpenModel, CheckedBody):
    metadata: dict[str, str]


class ItemsCreate(OpenModel, CheckedBody):
    items: list[Any]


def check_room(store: ConversationStore, conv_id: str, adding: int = 0, param: str = "items") -> None:
    """A conversation takes no more items once it holds its share of the store (a 400, nothing added): memory stays
    bounded however long a client keeps adding (a response continuing a full one is refused alike: its answer could
    not go in)."""
    held = store.chars(conv_id)
    if held + adding > store.max_conversation_chars:
        raise bad_request(f"conversation '{conv_id}' is full: it holds {held} characters of items and takes at most "
                          f"{store.max_conversation_chars}; start a new conversation", param=param)  # fmt: skip


def checked_items(items: list[Any]) -> list[dict[str, Any]]:
    """Items as a Responses `input` takes them, checked now (a 400 naming `items.N`) so that a conversation never
    holds one a later response would refuse."""
    if len(items) > MAX_ITEMS_A_CALL:
        raise bad_request(f"at most {MAX_ITEMS_A_CALL} items can be added at a time", param="items")
    try:
        convert_items(items, None, [])
    except APIError as e:
        if e.param is not None and e.param.startswith("input"):
            e.param = "items" + e.param[len("input"):]
        raise
    return items


def _not_found(conv_id: str, param: str) -> APIError:
    return APIError(404, f"Conversation with id '{conv_id}' not found (conversations are kept in memory, for a "
                         "bounded number of them)", param=param)  # fmt: skip


def conversation_or_404(store: ConversationStore, conv_id: str, param: str = "conversation_id") -> Conversation:
    conv = store.get(conv_id)
    if conv is None:
        raise _not_found(conv_id, param)
    return conv


def _conversation(request: Request, conv_id: str) -> Conversation:
    return conversation_or_404(get_state(request).conversations, conv_id)


@router.post("/v1/conversations")
async def create_conversation(body: ConversationCreate, request: Request):
    conv = get_state(request).conversations.create(checked_items(body.items or []), body.metadata)
    return conv.public()


@router.get("/v1/conversations/{conv_id}")
async def get_conversation(conv_id: str, request: Request):
    return _conversation(request, conv_id).public()


@router.post("/v1/conversations/{conv_id}")
async def update_conversation(conv_id: str, body: ConversationUpdate, request: Request):
    conv = _conversation(request, conv_id)
    conv.metadata = dict(body.metadata)
    return conv.public()


@router.delete("/v1/conversations/{conv_id}")
async def delete_conversation(conv_id: str, request: Request):
    if not get_state(request).conversations.delete(conv_id):
        raise _not_found(conv_id, "conversation_id")
    return {"id": conv_id, "object": "conversation.deleted", "deleted": True}


@router.post("/v1/conversations/{conv_id}/items")
async def add_items(conv_id: str, body: ItemsCreate, request: Request):
    _conversation(request, conv_id)
    check_room(get_state(request).conversations, conv_id, size_of(body.items))
    return list_page(get_state(request).conversations.add_items(conv_id, checked_items(body.items)) or [])


@router.get("/v1/conversations/{conv_id}/items")
async def list_items(conv_id: str, request: Request, query: PageQuery = Depends()):
    """The conversation's items, newest first unless `order=asc`, `limit` per page, the page after item `after`;
    `include` is accepted and ignored."""
    return query.page(_conversation(request, conv_id).items, f"conversation '{conv_id}'")


def _item_not_found(conv_id: str, item_id: str) -> APIError:
    return APIError(404, f"Item with id '{item_id}' not found in conversation '{conv_id}'", param="item_id")


@router.get("/v1/conversations/{conv_id}/items/{item_id}")
async def get_item(conv_id: str, item_id: str, request: Request):
    item = next((it for it in _conversation(request, conv_id).items if it["id"] == item_id), None)
    if item is None:
        raise _item_not_found(conv_id, item_id)
    return item


@router.delete("/v1/conversations/{conv_id}/items/{item_id}")
async def delete_item(conv_id: str, item_id: str, request: Request):
    conv = _conversation(request, conv_id)
    if not get_state(request).conversations.delete_item(conv_id, item_id):
        raise _item_not_found(conv_id, item_id)
    return conv.public()
