"""The one tile lookup: a kernel family's tuned entry for a shape, else the family's heuristic.

A key is (family, N, K, M bucket): N and K the family's problem size, the bucket the smallest power of two
>= M (rows of x, tokens, query rows) up to the family's max_m, or one of the family's finer buckets (a call
whose finer bucket has no entry takes the power of two above it; docs/ARCHITECTURE.md, "Tile tables"). TABLE
holds the packaged entries (tuned.py) and, with HINFER_TILES=path.json, a sweep's: a JSON list of
{"family", "n", "k", "m", "tile": {field: value}} as `entry` writes them, which adds or overrides entries, so
tiles swept on this GPU are used without editing the package.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from hinfer.ops.triton.tiles.forms import FINER, FORMS
from hinfer.ops.triton.tiles.tuned import TUNED

T = TypeVar("T")
Key = tuple[str, int, int, int]
ENV = "HINFER_TILES"


def m_bucket(m: int, max_m: int = 64, finer: tuple[int, ...] = ()) -> int:
    """The smallest power of two >= m, at most max_m; or the smallest of `finer` between m and that."""
    b = 1
    while b < m and b < max_m:
        b *= 2
    return min((f for f in finer if m <= f < b), default=b)


def _any_tile(tile: Any, m: int, n: int, k: int) -> bool:
    return True


@dataclass(frozen=True)
class Family(Generic[T]):
    """How one kernel family picks its tile: its TABLE entry under `name` (when it `fits` the call), else
    `heuristic(m, n, k, **context)`."""

    name: str
    heuristic: Callable[..., T]
    fits: Callable[[T, int, int, int], bool] = _any_tile  # (tile, m, n, k): may this call take that entry?
    fill_up: bool = False  # an untuned M bucket takes the next tuned bucket above (a family tuned at a few M)
    max_m: int = 64  # the largest bucket: larger M share its entries

    @property
    def finer(self) -> tuple[int, ...]:
        """Buckets between the powers of two (forms.FINER); a call whose finer bucket has no entry takes the power
        of two above."""
        return FINER.get(self.name, ())

    def bucket(self, m: int) -> int:
        """The bucket of M rows: m_bucket with this family's bounds."""
        return m_bucket(m, self.max_m, self.finer)


def lookup(family: Family[T], m: int, n: int, k: int, **context: Any) -> T:
    """The tile of one call: M rows (tokens) through an N x K problem; `context` is the heuristic's only."""
    b = family.bucket(m)
    while True:
        tile = TABLE.get((family.name, n, k, b))
        if tile is not None and family.fits(tile, m, n, k):
            return tile  # type: ignore[return-value]
        if b in family.finer:  # the power of two above a finer bucket
            b = m_bucket(b, family.max_m)
            continue
        if not family.fill_up or b >= family.max_m:
            return family.heuristic(m, n, k, **context)
        b *= 2


def entry(family: str, n: int, k: int, m: int, tile: Any) -> dict:
    """One entry as the sweeps write it and HINFER_TILES reads it (m: the M bucket)."""
    return {"family": family, "n": n, "k": k, "m": m, "tile": asdict(tile)}


def source_line(family: str, n: int, k: int, m: int, tile: Any) -> str:
    """The same entry as a line of tuned.py's TUNED."""
    return f"    ({family!r}, {n}, {k}, {m}): {_source(tile)},"


def write(path: Path, entries: list[dict]) -> None:
    path.write_text(json.dumps(entries, indent=1))


def load(path: str | Path) -> dict[Key, Any]:
    """A file of `entry` dicts -> TABLE entries, each built in its family's form (forms.FORMS)."""
    out: dict[Key, Any] = {}
    for e in json.loads(Path(path).read_text()):
        form, m = FORMS.get(e["family"]), e["m"]
        if form is None or m < 1 or m & (m - 1) and m not in FINER.get(e["family"], ()):
            raise ValueError(f"{path}: not a tile entry (unknown family, or M neither a power of two nor one of "
                             f"the family's finer buckets): {e}")
        out[(e["family"], e["n"], e["k"], m)] = _build(form, e["tile"], path)
    return out


def _build(form: type, values: dict, path: str | Path) -> Any:
    names = {f.name for f in fields(form)}
    if not names >= values.keys():
        raise ValueError(f"{path}: {form.__name__} has no {sorted(values.keys() - names)}")
    hints = typing.get_type_hints(form)
    return form(**{n: _build(hints[n], v, path) if is_dataclass(hints[n]) else v for n, v in values.items()})


def _source(v: Any) -> str:
    """A tile as tuned.py writes it: positional fields, trailing ones at their defaults left out."""
    if is_dataclass(v):
        fs = list(fields(v))
        while fs and fs[-1].default is not MISSING and getattr(v, fs[-1].name) == fs[-1].default:
            fs.pop()
        return f"{type(v).__name__}({', '.join(_source(getattr(v, f.name)) for f in fs)})"
    return repr(v)


TABLE: dict[Key, Any] = {**TUNED, **(load(os.environ[ENV]) if os.environ.get(ENV) else {})}
