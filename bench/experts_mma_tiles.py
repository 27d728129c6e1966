"""Tile sweep of the tensor-core experts kernels (int4: hinfer/ops/triton/moe_int4_mma.py; fp8 with `--fmt fp8`:
moe_fp8_mma.py) at the Qwen3.5 MoE shapes.

Each projection (gate_up: x -> [gate | up]; down: taking SiLU-mul as it loads, routing weights applied) is timed
alone, as a CUDA graph cycling through enough layers of random int4 experts (each with its own routing: top k + 1
distinct experts per token, the folded shared expert's slot included) that the selected experts come from HBM.
Tiles: rows per program, warps, look-ahead depth and K splits, each as the decode runs it (x staged in shared
memory where a block is one pair, HINFER_X_STAGED; `--x staged` everywhere it fits, `--x per-group` nowhere). The
winners print as TUNED entries (family moe_int4_mma, or moe_fp8_mma; hinfer/ops/triton/tiles/tuned.py) and
`--tuned-out` writes them for HINFER_TILES. fp8 experts (random e4m3 values, per-row scales as `--quant fp8` makes
them, or 128 x 128 blocks as the official FP8 checkpoints with `--scales block`) stage x where their tile says so
(`x_staged`; `--x staged` tries it wherever it fits) and have no ring: their tiles are rows, warps, depth, K splits,
register caps and x staged or not. `--layout` stores the int4 experts another way, the same values: the scales
and zero points group-major, or the row words stripe by stripe (HINFER_EXPERTS_WORDS=stripes; the tuned entries
are then the stripes' tiles).

    python bench/experts_mma_tiles.py [--model 35b 122b] [--t 1 8] [--splits 1,2,4] [--rings 0,3,4]
                                      [--rows 32,64,128,256] [--warps 1,2,4,8]
                                      [--x decode|staged|per-group] [--max-regs 0,128] [--json out.json]
                                      [--tuned-out t.json] [--fmt int4|fp8] [--scales channel|block]
                                      [--layout rows|groups|stripes]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.moe_kernels import MAX_LAYER_BYTES, MODELS, _graph_us, _random_int4  # noqa: E402
from bench.tile_sweep import read_x, time_tiles  # noqa: E402
from hinfer.ops.triton.moe import Fp8Experts  # noqa: E402
from hinfer.ops.triton.moe_align import align  # noqa: E402
from hinfer.ops.triton.moe_fp8_mma import fp8_experts_mma  # noqa: E402
from hinfer.ops.triton.moe_int4 import Int4Experts  # noqa: E402
from hinfer.ops.triton.moe_int4_mma import experts_mma  # noqa: E402
from hinfer.ops.triton.tiles.forms import MOE_FP8_MMA, MOE_INT4_MMA, SkinnyConfig  # noqa: E402
from hinfer.ops.triton.tiles.moe import (  # noqa: E402
    MOE_FP8_MMA_TILES,
    MOE_INT4_MMA_TILES,
    experts_mma_tile,
    fp8_experts_mma_tile,
)
from hinfer.ops.triton.tiles.table import entry, source_line, write  # noqa: E402
from hinfer.quant.int4_mma_layout import stored_as  # noqa: E402

BW = 4.2e12  # bytes/s the floors divide by (bench/moe_kernels.py's)
BM = 8  # rows per aligned block (hinfer.ops.triton.moe._experts_mma)


def candidates(n: int, k: int, splits: tuple[int, ...] = (1,), rings: tuple[int, ...] = (0,),
               block_ns: tuple[int, ...] = (32, 64, 128, 256), warp_counts: tuple[int, ...] = (1, 2, 4, 8),
               ) -> list[SkinnyConfig]:  # fmt: skip
    """BLOCK_N x warps (16-row stripes split over the warps) x register look-ahead depth x K splits (at least two
    128-groups each; split programs look 3 groups ahead), or instead of the look-ahead the words through a
    cp.async ring of `ring` slots (rings > 0); `block_ns` and `warp_counts` narrow the product."""
    out = []
    for block_n, warps, depth, split in itertools.product(block_ns, warp_counts, (2, 4), splits):
        if (n % block_n == 0 and block_n % (16 * warps) == 0 and block_n // (16 * warps) <= 4
                and k // 128 >= 2 * split and (split == 1 or depth == 4)):  # fmt: skip
            out += [SkinnyConfig(block_n, 128, BM, split, warps, depth, ring) for ring in rings
                    if ring == 0 or depth == 4]  # fmt: skip
    return out


class Routing:
    """One layer's routing at T tokens: k distinct experts per token (pair p = t * k + s) and the block tables."""

    def __init__(self, t: int, k: int, e: int, gen: torch.Generator) -> None:
        self.ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(t)]).cuda()
        self.tw = torch.rand(t * k, generator=gen).cuda()
        flat = self.ids.reshape(-1).contiguous()
        if t == 1:
            self.blocks, self.sorted, self.bexp, self.brows, self.direct = k, flat, flat, flat, True
        else:
            al = align(self.ids, e, BM)
            self.blocks, self.sorted, self.bexp, self.brows = al.n_blocks, al.sorted, al.bexp, al.brows
            self.direct = False
        self.flat, self.distinct = flat, torch.unique(flat).numel()


def _random_fp8(e: int, n: int, k: int, block: bool) -> Fp8Experts:
    """e4m3 values with per-row or 128 x 128 block scales, outputs ~1."""
    w = torch.randn(e, n, k, device="cuda").to(torch.float8_e4m3fn)
    shape = (e, -(-n // 128), k // 128) if block else (e, n)
    return Fp8Experts(w, torch.full(shape, k**-0.5, device="cuda"), block)


def _launch(fmt: str, x, w, y, r: Routing, xdiv: int, cfg: SkinnyConfig, **kw) -> None:
    """One projection's launch through the format's kernel, as the decode runs it."""
    if fmt == "fp8":
        fp8_experts_mma(x, w.weight, w.scale, w.block, y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct,
                        xdiv=xdiv, cfg=cfg, **kw)  # fmt: skip
    else:
        experts_mma(x, w, y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct, xdiv=xdiv, cfg=cfg, **kw)


def laid_out(w: Int4Experts, layout: str, gate_up: bool) -> Int4Experts:
    """w as `layout` stores it, the same values: `rows` as the model holds it; `groups` its scales and zero points
    group-major ([E, G, N] in memory, seen as [E, N, G]; the experts kernel reads them by their strides);
    `stripes` the row words stripe by stripe (int4_mma_layout.stripe_experts: a warp's load one 512-byte run, each
    word as the row layout packs it)."""
    if layout == "groups":
        def gm(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.transpose(1, 2).contiguous().transpose(1, 2)

        return w._replace(scales=gm(w.scales), zeros=gm(w.zeros))
    return stored_as(w, layout, gate_up)


def sweep(name: str, t: int, gen: torch.Generator, splits: tuple[int, ...] = (1,),
          rings: tuple[int, ...] = (0,), x: str = "decode", caps: tuple[int, ...] = (0,), fmt: str = "int4",
          block: bool = False, block_ns: tuple[int, ...] = (32, 64, 128, 256),
          warp_counts: tuple[int, ...] = (1, 2, 4, 8), layout: str = "rows") -> list[dict]:  # fmt: skip
    m = MODELS[name]
    e, k, h, i = m["e"] + 1, m["k"] + 1, m["h"], m["i"]  # the shared expert folded in: expert E, slot k
    per_layer = e * 3 * h * i * (1.05 if fmt == "fp8" else 0.55)
    n_layers = max(2, min(16, int(MAX_LAYER_BYTES // per_layer)))
    if fmt == "fp8":
        gu = [_random_fp8(e, 2 * i, h, block) for _ in range(n_layers)]
        dn = [_random_fp8(e, h, i, block) for _ in range(n_layers)]
        rings = (0,)
    else:
        gu = [_random_int4(e, 2 * i, h, False) for _ in range(n_layers)]
        dn = [_random_int4(e, h, i, False) for _ in range(n_layers)]
        gu, dn = [laid_out(w, layout, True) for w in gu], [laid_out(w, layout, False) for w in dn]
    routes = [Routing(t, k, e, gen) for _ in range(n_layers)]
    pairs = t * k
    xt = torch.randn(t, h, device="cuda").bfloat16()  # (x is how the tiles read it: --x)
    hid = torch.randn(pairs, i, device="cuda").bfloat16()  # the gate_up writes silu(gate) * up, the down reads it
    y_gu = torch.empty(pairs, i, device="cuda", dtype=torch.bfloat16)
    y_dn = torch.empty(pairs, h, device="cuda", dtype=torch.bfloat16)
    rows = []
    for proj, (n, kk) in (("gate_up", (2 * i, h)), ("down", (h, i))):
        def run(cfg: SkinnyConfig, proj=proj) -> None:
            for j in range(n_layers):
                if proj == "gate_up":
                    _launch(fmt, xt, gu[j], y_gu, routes[j], k, cfg, act=True)
                else:
                    _launch(fmt, hid, dn[j], y_dn, routes[j], 1, cfg, tw=routes[j].tw)

        blocks, direct = routes[0].blocks, routes[0].direct
        distinct = sum(r.distinct for r in routes) / n_layers
        # every tile reading x as --x says: by default as the decode does (int4: staged where a block is one pair,
        # HINFER_X_STAGED; fp8: as its entry says); rings are the int4 kernel's (fp8 sweeps pass none)
        fp8 = fmt == "fp8"
        family, tile = (MOE_FP8_MMA, fp8_experts_mma_tile) if fp8 else (MOE_INT4_MMA, experts_mma_tile)
        bucket = (MOE_FP8_MMA_TILES if fp8 else MOE_INT4_MMA_TILES).bucket(pairs)
        default = read_x(tile(pairs, n, kk, blocks), kk, direct, x, fp8)
        cands = [read_x(replace(c, max_regs=cap) if cap else c, kk, direct, x, fp8)
                 for c in candidates(n, kk, splits, rings, block_ns, warp_counts) for cap in caps]  # fmt: skip
        # bytes: the e4m3 values (fp8's scales a rounding error); int4's words, bf16 scales and uint8 zeros per 128
        nbytes = distinct * n * kk * (1 if fp8 else 0.5 + 3 / 128)
        timed = time_tiles(default, cands,
                           lambda cfg, run=run: _graph_us(lambda: run(cfg), n_layers), f"{name} {proj} T={t}")
        if timed is None:
            continue
        base = timed[0][0]
        best_us, best = min(timed, key=lambda v: v[0])
        if fmt == "int4":  # the table's form: int4 staging follows HINFER_X_STAGED, not the entry (fp8's, the entry)
            best = replace(best, x_staged=False)
        floor = nbytes / BW * 1e6
        print(f"{name:5s} {fmt} {proj:7s} T={t} pairs={pairs:<3d} default {base:6.2f} us ({floor / base:5.1%})  best "
              f"{best_us:6.2f} us ({floor / best_us:5.1%})  {best}", flush=True)
        for us, cfg in sorted(timed, key=lambda v: v[0])[:4]:
            print(f"      {us:6.2f} us  {cfg}")
        rows.append({"model": name, "proj": proj, "t": t, "pairs": pairs, "n": n, "k": kk, "blocks": blocks,
                     "default": asdict(default), "default_us": base, "best": asdict(best), "best_us": best_us,
                     "fmt": fmt, "floor_us": floor,
                     "entry": entry(family, n, kk, bucket, best),
                     "line": source_line(family, n, kk, bucket, best)})  # fmt: skip
    gu.clear(), dn.clear()
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), nargs="*", default=["35b", "122b"])
    ap.add_argument("--t", type=int, nargs="*", default=[1, 8], help="tokens (pairs = tokens x (top k + 1))")
    ap.add_argument("--splits", default="1,2,4", help="K splits to try (1: none)")
    ap.add_argument("--rings", default="0", help="cp.async ring slots for the words to try (0: the register look-ahead)")
    ap.add_argument("--rows", default="32,64,128,256", help="rows a program (BLOCK_N) to try")
    ap.add_argument("--warps", default="1,2,4,8", help="warps a program to try")
    ap.add_argument("--x", choices=["decode", "staged", "per-group"], default="decode",
                    help="how every tile reads x: as the decode does (HINFER_X_STAGED), staged in shared memory "
                         "wherever it fits, or from L2 a group at a time")  # fmt: skip
    ap.add_argument("--max-regs", default="0", help="register caps to try each tile under (0: none); in the "
                    "decode graph the one-token tiles won under 128 where alone the cap changed nothing")
    ap.add_argument("--fmt", choices=["int4", "fp8"], default="int4", help="the experts' weight format")
    ap.add_argument("--scales", choices=["channel", "block"], default="channel",
                    help="fp8: per-row scales (--quant fp8) or 128 x 128 blocks (the official FP8 checkpoints)")
    ap.add_argument("--layout", choices=["rows", "groups", "stripes"], default="rows",
                    help="int4: the experts as the model holds them, with the scales and zero points group-major "
                         "(each 128-group's rows contiguous), or with the row words stripe by stripe, the same "
                         "values")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tuned-out", type=Path, help="the winners as HINFER_TILES entries (moe_int4_mma / moe_fp8_mma)")
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    print(f"seed {a.seed}")
    rows: list[dict] = []
    for name in a.model:
        for t in a.t:
            rows += sweep(name, t, gen, tuple(int(v) for v in a.splits.split(",")),
                          tuple(int(v) for v in a.rings.split(",")), a.x,
                          tuple(int(v) for v in a.max_regs.split(",")), a.fmt, a.scales == "block",
                          tuple(int(v) for v in a.rows.split(",")), tuple(int(v) for v in a.warps.split(",")),
                          a.layout)  # fmt: skip
            if a.tuned_out:  # as it goes: a sweep cut short keeps what it measured
                write(a.tuned_out, [r["entry"] for r in rows])
    print("\nTUNED entries (paste into hinfer/ops/triton/tiles/tuned.py):\n" + "\n".join(r["line"] for r in rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
