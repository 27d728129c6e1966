"""The packaged int4 tiles of one model with a register cap (SkinnyConfig.max_regs), as HINFER_TILES files: one
file per (family, cap), every packaged entry of that family at the model's shapes capped, to time in the decode
graph (scripts/gpu_tile_caps.sh) rather than alone: under PDL each launch shares the SMs with its neighbour, and
there programs per SM count (the 27B's ring tiles at 96 registers: +4.8% at one lane; alone they ranked the
other way, bench/RESULTS.md).

    python bench/tile_caps.py --config qwen3.6-35b-a3b --caps 128,96 --out-dir /tmp/caps
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.int4_mma_tiles import config_shapes  # noqa: E402


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


def capped_entries(config: str, family: str, cap: int) -> list[dict]:
    """The packaged entries of `family` at `config`'s shapes, each with max_regs = cap."""
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.tuned import TUNED

    shapes = model_shapes(config).get(family, set())
    return [table.entry(f, n, k, m, replace(t, max_regs=cap)) for (f, n, k, m), t in TUNED.items()
            if f == family and (n, k) in shapes]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from hinfer.ops.triton.tiles import table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a packaged config, e.g. qwen3.6-35b-a3b")
    ap.add_argument("--caps", default="128,96", help="register caps, one file each per family")
    ap.add_argument("--out-dir", type=Path, required=True)
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for family in model_shapes(a.config):
        for cap in (int(c) for c in a.caps.split(",")):
            entries = capped_entries(a.config, family, cap)
            if entries:
                path = a.out_dir / f"{a.config}-{family}-{cap}regs.json"
                table.write(path, entries)
                print(f"{path}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
