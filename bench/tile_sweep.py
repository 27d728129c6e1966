"""What the tile sweeps share: time the default tile, then every candidate, skipping (and reporting) the ones
that do not compile or fit."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def time_tiles(default: Any, candidates: Iterable[Any], measure: Callable[[Any], float],
               label: str) -> list[tuple[float, Any]] | None:  # fmt: skip
    """[(measure(tile), tile)] with the default first, or None when the default itself failed."""
    timed = []
    for cfg in dict.fromkeys([default, *candidates]):
        try:
            timed.append((measure(cfg), cfg))
        except Exception as ex:  # noqa: BLE001 - a tile that does not compile or fit: report, go on
            print(f"  {label} {cfg}: {type(ex).__name__}: {str(ex)[:100]}", flush=True)
    if not timed or timed[0][1] != default:
        print(f"{label}: the default tile {default} failed", flush=True)
        return None
    return timed
