"""The JSON schema `hinfer bench --structured` constrains its lanes with: an order report, nested objects, an array
of line items, enums, bounded strings, integers and numbers with ranges, booleans, a short array of strings.

Every string and number is bounded, so the grammar keeps cycling through structure (keys, separators, enums)
rather than sitting in one free-text span; `minItems` is set by the bench to the tokens a lane makes, so the
answer cannot be complete before the timed window ends (each item takes at least one token), whatever a
random-weight model picks.
"""

from __future__ import annotations

from typing import Any


def _number(lo: float, hi: float) -> dict[str, Any]:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _object(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def report_schema(min_items: int) -> dict[str, Any]:
    item = _object({
        "sku": {"type": "string", "maxLength": 12},
        "name": {"type": "string", "maxLength": 40},
        "category": {"type": "string", "enum": ["tools", "garden", "kitchen", "toys", "books"]},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 999},
        "unit_price": _number(0, 10000),
        "in_stock": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
        "dimensions": _object({k: _number(0, 500) for k in ("width_cm", "height_cm", "depth_cm")}),
    })  # fmt: skip
    return _object({
        "report_id": {"type": "string", "maxLength": 16},
        "status": {"type": "string", "enum": ["draft", "final", "archived"]},
        "customer": _object({"name": {"type": "string", "maxLength": 32},
                             "tier": {"type": "string", "enum": ["free", "pro", "enterprise"]}}),
        "items": {"type": "array", "items": item, "minItems": min_items},
    })  # fmt: skip
