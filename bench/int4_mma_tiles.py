"""Tile sweep of the int4 tensor-core kernel on fragment-ordered weights (hinfer/ops/triton/linear_int4_mma.py)
at the Qwen3.6-27B shapes, timed like bench/linear_kernels.py (CUDA graph over weight copies that do not fit in
L2), beside its default tile. It prints the winners as TUNED entries (hinfer/ops/triton/tiles/tuned.py);
`--tuned-out` writes them in the form HINFER_TILES reads.

    python bench/int4_mma_tiles.py --ms 1,8,16,32 [--sym] [--fma-offset] [--x-ahead] [--rings 0,4] [--json out.json] [--tuned-out t.json]
    python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --ms 1,8 --packaged --x-ahead   # the packaged tile, each way
    python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --ms 1 --shapes qkv,gdn_in,o_proj --splits 1,2,4
    python bench/int4_mma_tiles.py --a8 --ms 1,4,8 --tuned-out a8.json   # the int4 x int8 kernel's tiles

With --a8 the candidates run the int4 x int8 kernel (hinfer/ops/triton/linear_int4_a8.py: BLOCK_M 8, rings of
2 or 4 slots, splits near the packaged tile's; past 8 rows x quantized ahead, BLOCK_M 8, 16 or 32) against the
packaged bf16 path (Int4MmaWeight.matmul with HINFER_INT4_DECODE=bf16: the warpgroup kernel where its entry is,
else the mma.sync kernel's tile), and a winner is written (family int4_a8) only where it beat that by more than
--a8-margin: HINFER_INT4_DECODE=tuned takes the int8 kernel exactly there.

    python bench/int4_mma_tiles.py --a8 --ms 16,32 --a8-all --tuned-out a8-rows.json   # verification's rows

The bf16 kernel's candidates and its default read x as the decode does (`--x decode`: staged in shared memory at
one row, HINFER_X_STAGED), or `--x staged` / `--x per-group` at every M; `--max-regs 0,128` tries each tile
also under a register cap (in the PDL-chained decode graph a cap has won where a launch alone showed nothing).

    python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --ms 1 --splits 1,2,4,8 --max-regs 0,128
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.linear_kernels import (  # noqa: E402
    PROXY_SHAPES,
    SHAPES,
    _copies,
    _gen,
    config_shapes,
    copy_bandwidth,
    graph_time,
    make_weight,
)
from bench.tile_sweep import read_x, time_tiles  # noqa: E402


def candidates(m: int, n: int, k: int, rings: tuple[int, ...] = (0,), fma: bool = False,
               splits: tuple[int, ...] = (1, 2, 4, 8, 16), min_groups: int = 4,
               block_ns: tuple[int, ...] = (16, 32, 64, 128, 256), warp_counts: tuple[int, ...] = (1, 2, 4, 8),
               max_programs: int = 8 * 132):
    """Tiles (SkinnyConfig: BLOCK_N, 128, BLOCK_M, split, warps, depth, ring) that fit N, >= min_groups per split; 8
    warps only from BLOCK_M 32 (4 warps spill there). BLOCK_M is x's rows padded, or half that from 16 rows (two
    programs per weight tile, the second reading it from L2). BLOCK_N from 16 rows (one warp) to 256: the narrow
    tiles give small matrices programs without splitting K. Ring 0 tries the register look-ahead depths 2 and 4,
    with `fma` each also with the per-weight offset (fma_offset); a ring of R > 0 groups streams through shared
    memory (depth unused). Grids past `max_programs` programs are left out (0: none is)."""
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import mma_block_m

    padded = mma_block_m(m)
    out = []
    for block_m, block_n, warps, split, ring in itertools.product(
        dict.fromkeys((padded, max(8, padded // 2))), block_ns, warp_counts, splits, rings
    ):
        groups = k // 128 // split
        if n % block_n or block_n % (16 * warps) or groups < min_groups or (block_m >= 32 and warps <= 4):
            continue
        if max_programs and (n // block_n) * split * -(-m // block_m) > max_programs:  # partials would cost more
            continue
        for depth in (d for d in (2, 4) if d <= groups) if ring == 0 else (2,):
            out.append(SkinnyConfig(block_n, 128, block_m, split, warps, depth, ring))
            if fma and ring == 0:
                out.append(SkinnyConfig(block_n, 128, block_m, split, warps, depth, ring, fma_offset=True))
    return out


def a8_candidates(m: int, n: int, k: int, splits: tuple[int, ...], near: int = 0):
    """Tiles of the int4 x int8 kernel: BLOCK_N 128 (4 or 8 warps) or 256 (8), rings of 2 or 4 slots, splits
    keeping >= 4 groups and the grid under ~8 programs an SM; `near` (a split): only half, that and twice it; from
    2 rows each also with x quantized ahead in its own launch (x_ahead); past 8 rows only that, in MMA column
    blocks of 8, 16 or 32 rows of x a program."""
    from dataclasses import replace

    from hinfer.ops.triton.linear_int4_a8 import a8_takes
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import mma_block_m

    if near:
        splits = tuple(s for s in splits if near // 2 <= s <= near * 2)
    block_ms = [b for b in (8, 16, 32) if b <= mma_block_m(m)] if m > 8 else [8]
    out = []
    for (block_n, warps), split, ring, block_m in itertools.product(((128, 4), (128, 8), (256, 8)), splits, (2, 4),
                                                                     block_ms):  # fmt: skip
        if n % block_n or k // 128 // split < 4 or (n // block_n) * split * -(-m // block_m) > 8 * 132:
            continue
        cfg = SkinnyConfig(block_n, 128, block_m, split, warps, 2, ring, x_ahead=m > 8)
        for c in (cfg, replace(cfg, x_ahead=True)) if 1 < m <= 8 else (cfg,):  # x quantized ahead: one launch more
            if a8_takes(m, n, k, c, zero=True):
                out.append(c)
    return out


def _packaged_bf16(x, w, cfg=None):
    """Int4MmaWeight.matmul with x as it is (HINFER_INT4_DECODE=bf16, set for --a8 runs): the path the int8 kernel's
    entries would replace."""
    return w.matmul(x)


def main() -> None:
    from dataclasses import asdict, replace

    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.forms import INT4_A8, INT4_MMA
    from hinfer.ops.triton.tiles.linear import mma_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", default="1,8,16,32")
    ap.add_argument("--shapes", help="projections to sweep (default: qkv,gdn_in,gate_up,o_proj,down of the 27B; all of "
                    "a --config's, of which the MoE models run only qkv, gdn_in, o_proj and gdn_out densely)")
    ap.add_argument("--splits", default="1,2,4,8,16", help="K splits to try")
    ap.add_argument("--min-groups", type=int, default=4,
                    help="fewest 128-groups a split keeps (2: twice the programs of 4 on a small matrix)")
    ap.add_argument("--rows", default="16,32,64,128,256", help="rows a program (BLOCK_N) to try")
    ap.add_argument("--warps", default="1,2,4,8", help="warps a program to try")
    ap.add_argument("--max-programs", type=int, default=8 * 132,
                    help="leave out tiles whose grid passes this many programs (0: keep every tile)")
    ap.add_argument("--config", help="a packaged config (e.g. qwen3.6-35b-a3b): its shapes instead of the 27B's")
    ap.add_argument("--sym", action="store_true", help="symmetric weights (default asymmetric)")
    ap.add_argument("--fma-offset", action="store_true",
                    help="also the per-weight offset variant of each register look-ahead tile (fma_offset)")
    ap.add_argument("--x-ahead", action="store_true",
                    help="also each candidate with x loaded ahead of its MMA (x_ahead)")
    ap.add_argument("--packaged", action="store_true",
                    help="only the packaged tile (and, with --x-ahead, its x_ahead twin): a quick check per shape")
    ap.add_argument("--rings", default="0", help="shared-memory ring sizes to try (0: register look-ahead)")
    ap.add_argument("--a8", action="store_true",
                    help="sweep the int4 x int8 kernel against the packaged bf16 path (family int4_a8; past 8 rows x "
                    "quantized ahead, blocks of 8-32 rows of x a program)")
    ap.add_argument("--a8-all", action="store_true",
                    help="with --a8, every split (default: half, the same and twice the packaged tile's)")
    ap.add_argument("--a8-margin", type=float, default=0.02,
                    help="with --a8, write an entry only where the best tile is this much faster (default 2%%)")
    ap.add_argument("--x", choices=["decode", "staged", "per-group"], default="decode",
                    help="how the bf16 kernel's tiles read x: as the decode does (staged at one row), staged "
                         "wherever it fits, or each group's from L2")
    ap.add_argument("--max-regs", default="0", help="register caps to try each tile under (0: none)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tuned-out", type=Path, help="the winners as HINFER_TILES entries (family int4_mma)")
    a = ap.parse_args()
    if a.a8:
        os.environ["HINFER_INT4_DECODE"] = "bf16"  # the bar (_packaged_bf16) without the int8 kernel's entries
    bw = copy_bandwidth()
    fmt = "int4-mma-sym" if a.sym else "int4-mma"
    g = _gen(4)
    rows, tuned, lines = [], [], []
    shapes = config_shapes(a.config) if a.config else SHAPES
    if a.shapes:  # the lm_head (int4 only with --lm-head int4) and a MoE layer's experts as one dense GEMV when named
        shapes = [s for s in shapes + PROXY_SHAPES if s[0] in a.shapes.split(",")]
    else:
        shapes = [s for s in shapes if s[0] != "lm_head"]
    for name, n, k in {(n, k): (name, n, k) for name, n, k in reversed(shapes)}.values():  # one per (N, K)
        w, nbytes = make_weight(fmt, n, k, g)
        weights = _copies(w, nbytes, 128 << 20)  # 2.5x the L2: small shapes capture far fewer launches per tile
        for m in (int(v) for v in a.ms.split(",")):
            x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
            default = read_x(mma_config(m, n, k), k, m == 1, a.x)
            rings = tuple(int(r) for r in a.rings.split(","))

            want = w.matmul_ref(x).float() if hasattr(w, "matmul_ref") else int4_mma_matmul(x, w).float()
            # the int8 kernel's own reference (x rounded as it rounds it)
            want_a8 = w.to_int4().matmul_ref_a8(x).float() if a.a8 else want

            def measure(cfg, x=x, w=w, weights=weights, want=want, want_a8=want_a8):
                a8 = isinstance(cfg, tuple)  # ("a8", tile): the int8 kernel's candidates
                cfg = cfg[1] if a8 else cfg
                run = int4_a8_matmul if a8 else int4_mma_matmul
                if a.a8 and not a8:  # the bar: what the packaged tables run without the int8 kernel (the warpgroup
                    run = _packaged_bf16  # kernel where its entry is, else the mma.sync kernel's tile)
                got = run(x, w, cfg=cfg).float()  # a tile that computes wrong never wins
                ref = want_a8 if a8 else want
                rel = ((got - ref).norm() / ref.norm()).item()
                if not rel < 1e-2:
                    raise ValueError(f"rel-L2 {rel:.3g} against the reference")
                return graph_time(lambda wt: run(x, wt, cfg=cfg), weights)

            splits = tuple(int(v) for v in a.splits.split(","))
            if a.a8:  # the default (bf16 kernel, packaged tile) is timed first as the bar
                tiles = [("a8", t) for t in a8_candidates(m, n, k, splits, 0 if a.a8_all else default.split_k)]
            else:
                tiles = [default] if a.packaged else candidates(
                    m, n, k, rings, a.fma_offset, splits, a.min_groups, tuple(int(v) for v in a.rows.split(",")),
                    tuple(int(v) for v in a.warps.split(",")), a.max_programs)
            if a.x_ahead:
                tiles += [replace(t, x_ahead=not t.x_ahead) for t in tiles]
            if not a.a8:
                caps = [int(v) for v in a.max_regs.split(",")]
                tiles = list(dict.fromkeys(read_x(replace(t, max_regs=c) if c else t, k, m == 1, a.x)
                                           for t in tiles for c in caps))  # fmt: skip
            timed = time_tiles(default, tiles, measure, f"{name} M={m}")
            if timed is None:
                continue
            base = timed[0][0]
            best_t, best = min(timed, key=lambda t: t[0])
            if a.a8:
                if len(timed) < 2:
                    continue
                best_t, best = min(timed[1:], key=lambda t: t[0])
                best = best[1]
            print(f"{name:8s} M={m:<3d} default {default} {base * 1e6:7.1f} us {nbytes / base / bw:6.1%}   "
                  f"best {best} {best_t * 1e6:7.1f} us {nbytes / best_t / bw:6.1%}", flush=True)
            rows.append({"shape": name, "n": n, "k": k, "m": m, "default": asdict(default), "default_us": base * 1e6,
                         "best": asdict(best), "best_us": best_t * 1e6, "bytes": nbytes, "copy_bw": bw})  # fmt: skip
            family = INT4_A8 if a.a8 else INT4_MMA
            if a.a8 and not best_t < base * (1 - a.a8_margin):
                continue  # the bf16 kernel stays here
            tuned.append(table.entry(family, n, k, table.m_bucket(m), best))
            lines.append(table.source_line(family, n, k, table.m_bucket(m), best))
            if a.tuned_out:  # as it goes: a sweep cut short keeps what it measured
                table.write(a.tuned_out, tuned)
        del w, weights
        torch.cuda.empty_cache()
    print("\nTUNED entries (paste into hinfer/ops/triton/tiles/tuned.py):\n" + "\n".join(lines))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
