"""Input items as OpenAI lists them, a page at a time: a stored response's input items and a conversation's."""

from __future__ import annotations

from typing import Any

from fastapi import Query

from hinfer.server.errors import bad_request
from hinfer.server.ids import new_id

_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_", "reasoning": "rs_",
              "custom_tool_call": "ctc_", "custom_tool_call_output": "ctco_", "tool_search_call": "tsc_",
              "tool_search_output": "tso_"}  # fmt: skip


def listed_item(item: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    """An input item as OpenAI lists it: with an id (its own; else `item_id`, else one made up by its type), a type,
    and a message's text content as parts (the shorthand {"role", "content": "text"} spelled out)."""
    out = {k: v for k, v in item.items() if k != "id"}
    if "type" not in out and "role" in out:
        out["type"] = "message"
    if out.get("type") == "message" and isinstance(out.get("content"), str):
        part = "output_text" if out.get("role") == "assistant" else "input_text"
        out["content"] = [{"type": part, "text": out["content"]}]
    return {"id": item.get("id") or item_id or new_id(_ID_PREFIX.get(out.get("type"), "item_")), **out}


class PageQuery:
    """A list route's query: `after` an item id, `limit` 1-100 (20), `order` asc or desc (newest first)."""

    def __init__(self, after: str | None = None, limit: int = Query(20, ge=1, le=100),
                 order: str = Query("desc", pattern="^(asc|desc)$")):  # fmt: skip
        self.after, self.limit, self.order = after, limit, order

    def page(self, items: list[dict[str, Any]], owner: str) -> dict[str, Any]:
        """The page of `items` asked for (a 400 when `owner` holds no item `after`)."""
        return page_after(list(reversed(items)) if self.order == "desc" else items, self.after, self.limit, owner)


def page_after(items: list[dict[str, Any]], after: str | None, limit: int, owner: str) -> dict[str, Any]:
    """The `limit` items that follow the one with id `after` (from the first without; a 400 when `owner` holds no
    such item), as a list page."""
    if after is not None:
        at = next((i for i, it in enumerate(items) if it["id"] == after), None)
        if at is None:
            raise bad_request(f"No item with id '{after}' in {owner}", param="after")
        items = items[at + 1:]
    return list_page(items[:limit], len(items) > limit)


def list_page(data: list[dict[str, Any]], has_more: bool = False) -> dict[str, Any]:
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}
