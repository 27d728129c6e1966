"""The packaged int4 tiles of one model changed one way (a register cap, SkinnyConfig.max_regs; two groups to a
ring slot, ring_pairs; ...), as HINFER_TILES files: one file per (family, variant), every packaged entry of that
family at the model's shapes changed where the change applies, to time in the decode graph
(scripts/gpu_tile_variants.sh) rather than alone: under PDL each launch shares the SMs with its neighbour, and
there programs per SM count (the 27B's ring tiles at 96 registers: +4.8% at one lane; alone they ranked the
other way, bench/RESULTS.md).

    python bench/tile_variants.py --config qwen3.6-35b-a3b --variants max_regs=128 max_regs=96 --out-dir /tmp/v
    python bench/tile_variants.py --config qwen3.6-27b --variants ring=3,ring_pairs=1 --out-dir /tmp/v
    python bench/tile_variants.py --config qwen3.6-35b-a3b --variants max_regs=128 --max-m 16 --families moe_int4_mma \
        --out-dir /tmp/v
    python bench/tile_variants.py --config qwen3.6-35b-a3b --variants max_regs=168 --min-m 32 --families moe_int4_mma \
        --out-dir /tmp/v   # the experts past one lane only
    python bench/tile_variants.py --config qwen3.6-27b --a8-rows 2,4 --out-dir /tmp/v   # the int4 x int8 kernel there

--a8-rows writes int4_a8 entries (where the int4 x int8 kernel takes over) at those rows of x for every dense
projection of the model, each on the bf16 kernel's packaged tile (x_ahead off: that kernel has no such loop), the
way its one-row entries won in the decode graph.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.linear_kernels import config_shapes  # noqa: E402


def model_shapes(config: str) -> dict[str, set[tuple[int, int]]]:
    """(N, K) per family: the dense int4 projections (int4_mma) and, for a MoE model, the routed experts' gate_up
    (2 I x H) and down (H x I) (moe_int4_mma)."""
    from hinfer.config import load_model_config
    from hinfer.fixtures import config_dir
    from hinfer.ops.triton.tiles.forms import INT4_MMA, MOE_INT4_MMA

    out = {INT4_MMA: {(n, k) for _, n, k in config_shapes(config)}}
    c = load_model_config(config_dir(config))
    if c.num_experts:
        h, i = c.hidden_size, c.moe_intermediate_size
        out[MOE_INT4_MMA] = {(2 * i, h), (h, i)}
    return out


def parse_variant(text: str) -> dict[str, int]:
    """"max_regs=96" or "ring=3,ring_pairs=1" -> the fields to set (integers; booleans as 0 / 1)."""
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key.strip()] = int(value)
    return out


def changed(tile, change: dict[str, int]):
    """`tile` with `change`'s fields set (each in its field's type), or None where the kernel would not take it:
    two groups a slot only where a ring streams with x ahead; a ring only with the offset taken off by the MMA
    against ones (not fma_offset)."""
    t = replace(tile, **{key: type(getattr(tile, key))(v) for key, v in change.items()})
    if (t.ring_pairs and not (t.ring and t.x_ahead)) or (t.ring and t.fma_offset):
        return None
    return t


def changed_entries(config: str, family: str, change: dict[str, int], max_m: int = 0,
                    min_m: int = 0) -> list[dict]:  # fmt: skip
    """The packaged entries of `family` at `config`'s shapes (and M buckets from min_m up to max_m, where given)
    to which `change` applies, changed."""
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.tuned import TUNED

    shapes = model_shapes(config).get(family, set())
    out = []
    for (f, n, k, m), t in TUNED.items():
        fits = f == family and (n, k) in shapes and (not max_m or m <= max_m) and m >= min_m
        new = changed(t, change) if fits else None
        if new is not None:
            out.append(table.entry(f, n, k, m, new))
    return out


def a8_entries(config: str, rows: list[int], ahead: bool = False) -> list[dict]:
    """int4_a8 entries at `rows` rows of x for `config`'s dense int4 projections, on the bf16 kernel's tiles
    (ahead: x quantized in its own launch before the matmul, instead of in each program's prologue)."""
    from hinfer.ops.triton.linear_int4_a8 import a8_takes
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.forms import INT4_A8
    from hinfer.ops.triton.tiles.linear import mma_config

    out = []
    for n, k in sorted({(n, k) for name, n, k in config_shapes(config) if name != "lm_head"}):  # the head: bf16
        for m in rows:
            tile = replace(mma_config(m, n, k, sms=132), x_ahead=ahead and m > 1)
            if a8_takes(m, n, k, tile, zero=True):
                out.append(table.entry(INT4_A8, n, k, table.m_bucket(m), tile))
    return out


def main(argv: list[str] | None = None) -> int:
    from hinfer.ops.triton.tiles import table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a packaged config, e.g. qwen3.6-35b-a3b")
    ap.add_argument("--variants", nargs="+", default=["max_regs=128", "max_regs=96"],
                    help="changes, each FIELD=INT[,FIELD=INT...]: one file per family and change")
    ap.add_argument("--families", help="only these families (comma-separated, e.g. int4_mma); default all")
    ap.add_argument("--max-m", type=int, default=0,
                    help="change only the entries of M buckets up to this (e.g. 16: the experts at one lane)")
    ap.add_argument("--min-m", type=int, default=0,
                    help="change only the entries of M buckets from this (e.g. 32: the experts past one lane)")
    ap.add_argument("--a8-rows", help="instead: int4_a8 entries at these rows of x (e.g. 2,4), on the bf16 kernel's tiles")
    ap.add_argument("--a8-ahead", action="store_true", help="with --a8-rows: x quantized ahead in its own launch")
    ap.add_argument("--out-dir", type=Path, required=True)
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    if a.a8_rows:
        rows = [int(v) for v in a.a8_rows.split(",")]
        ahead = "-ahead" if a.a8_ahead else ""
        path = a.out_dir / f"{a.config}-int4_a8-rows{'-'.join(map(str, rows))}{ahead}.json"
        entries = a8_entries(a.config, rows, a.a8_ahead)
        table.write(path, entries)
        print(f"{path}: {len(entries)} entries")
        return 0
    for family in model_shapes(a.config):
        if a.families and family not in a.families.split(","):
            continue
        for text in a.variants:
            entries = changed_entries(a.config, family, parse_variant(text), a.max_m, a.min_m)
            if entries:
                tag = (text.replace("=", "").replace(",", "-").replace("_", "") + (f"-m{a.max_m}" if a.max_m else "")
                       + (f"-from-m{a.min_m}" if a.min_m else ""))
                path = a.out_dir / f"{a.config}-{family}-{tag}.json"
                table.write(path, entries)
                print(f"{path}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
