"""What the tile sweeps share: time the default tile, then every candidate, skipping (and reporting) the ones
that do not compile or fit; keep the rows and the winning entries (Winners)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
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


def read_x(cfg: Any, k: int, one_row: bool, x: str, as_entry: bool = False) -> Any:
    """A tensor-core tile (SkinnyConfig) reading x as a sweep's --x says: `decode` as the tables' tiles are run
    (int4: linear_int4_mma.x_staged_choice, HINFER_X_STAGED, staged where a program reads one row; `as_entry`, the
    fp8 experts': as the tile says), `staged` in shared memory wherever it fits (staged_where_fits), `per-group`
    from L2 a group at a time."""
    from dataclasses import replace

    from hinfer.ops.triton.linear_int4_mma import staged_where_fits, x_staged_choice

    if x == "per-group":
        return replace(cfg, x_staged=False)
    if x == "staged":
        return staged_where_fits(cfg, k, one_row)
    return cfg if as_entry else x_staged_choice(cfg, k, one_row)


def spill_free(candidates: Iterable[Any], variant: Callable[[Any], tuple], label: str) -> list[Any]:
    """The candidates whose sm_90 build (linear_aot, `variant(tile)` -> its (name, kernel, signature, constexprs,
    warps)) keeps every register in registers: a spilling tile is never packaged (tests/quant/test_sm90_compile.py
    refuses it), so it is not timed either. Builds are cached by the variant's name (it names every constant)."""
    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources

    out = []
    for cfg in candidates:
        name, fn, sig, cex, warps = variant(cfg)
        if name not in _stacks:
            _stacks[name] = resources(compile_gluon_sm90(fn, sig, cex, warps))["stack"]
        if _stacks[name]:
            print(f"  {label}: {cfg} spills {_stacks[name]} bytes on sm_90, left out", flush=True)
        else:
            out.append(cfg)
    return out


_stacks: dict[str, int] = {}


@dataclass
class Winners:
    """A sweep's rows and its winning entries of one tile family: each best tile that beat the bar (the path it
    would replace) by more than `margin` becomes an entry; rows and entries are written as they come (a run cut
    short keeps what it measured)."""

    family: str
    margin: float
    json_path: Path | None = None
    tiles_path: Path | None = None
    rows: list[dict] = field(default_factory=list)
    wins: list[tuple] = field(default_factory=list)

    def add(self, row: dict, n: int, k: int, m: int, bar_s: float, best_s: float, best: Any) -> None:
        from hinfer.ops.triton.tiles.table import entry, m_bucket, write

        self.rows.append(row)
        if best_s * (1 + self.margin) < bar_s:
            self.wins.append((n, k, m_bucket(m), best))
        if self.json_path:
            self.json_path.write_text(json.dumps(self.rows, indent=1))
        if self.tiles_path:
            write(self.tiles_path, [entry(self.family, *e) for e in self.wins])

    def print_lines(self, what: str) -> None:
        from hinfer.ops.triton.tiles.table import source_line

        print(f"# {what} (tuned.py lines):")
        for e in self.wins:
            print(source_line(self.family, *e))


def add_shape_args(ap) -> None:
    """The sweeps' common options: rows of x, the 27B's projections by name or a packaged config's, a JSON of rows."""
    ap.add_argument("--ms", default="1,2,4,8,16,32")
    ap.add_argument("--shapes", default="qkv,gdn_in,gate_up,o_proj,down")
    ap.add_argument("--config", help="a packaged config (e.g. qwen3.6-35b-a3b): its shapes instead of the 27B's")
    ap.add_argument("--json", type=Path)


def chosen_shapes(a) -> list[tuple[str, int, int]]:
    """(name, N, K) of the projections add_shape_args' options name: a config's dense ones (no lm_head), or the
    27B's by --shapes."""
    from bench.linear_kernels import SHAPES, config_shapes

    if a.config:
        return [s for s in config_shapes(a.config) if s[0] != "lm_head"]
    return [s for s in SHAPES if s[0] in a.shapes.split(",")]
