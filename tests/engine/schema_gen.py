"""Seeded random JSON schemas for structured-output tests: objects of string / integer / number / boolean / enum /
array / nested object properties with `required` lists. Every value is bounded (string lengths, number ranges,
array sizes) so a grammar forces an answer to finish even under a random-weight model."""

from __future__ import annotations

import random
from typing import Any


def _leaf(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["string", "integer", "number", "boolean", "enum"])
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 6)}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number", "minimum": -10, "maximum": 10}
    if kind == "enum":
        return {"type": "string", "enum": rng.sample(["red", "green", "blue", "a b", "x\"y"], rng.randint(1, 3))}
    return {"type": "boolean"}


def _value(rng: random.Random, depth: int) -> dict[str, Any]:
    r = rng.random()
    if depth < 2 and r < 0.15:
        return random_schema(rng, depth + 1)
    if r < 0.3:
        return {"type": "array", "items": _leaf(rng), "minItems": 0, "maxItems": rng.randint(1, 3)}
    return _leaf(rng)


def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    names = rng.sample(["id", "name", "size", "ok", "tags", "color", "info", "score", "when"], rng.randint(1, 4))
    props = {n: _value(rng, depth) for n in names}
    required = [n for n in names if rng.random() < 0.7]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
