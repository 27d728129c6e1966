"""The int4 warpgroup-MMA kernel (hinfer/ops/triton/linear_int4_wgmma.py) against the mma.sync kernel with its
packaged tile, at the Qwen3.6-27B shapes and 8-64 rows of x (8 lanes of decode, 8 lanes x 4 verified tokens),
timed like bench/linear_kernels.py (CUDA graph over weight copies that do not fit in L2). Prints, per shape and
M, the mma.sync time, the best wgmma tile and both as a share of the copy bandwidth, and the packaged decode path's
time (the int4 x int8, warpgroup or mma.sync kernel, as the tile table picks); `--json` keeps every row.
`--tiles` writes the wgmma entries (family int4_wgmma) where the best tile beats mma.sync by more than 3%, as
HINFER_TILES reads them, and prints them as tuned.py lines: an entry is also where the kernel takes over.

    python bench/int4_wgmma.py [--ms 1,2,4,8,16,32] [--shapes qkv,gdn_in,gate_up,o_proj,down | --config NAME]
                               [--rings 0,1,2,4] [--regs 0,80] [--async 0,1] [--near]
                               [--json out.json] [--tiles tiles.json]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.linear_kernels import _copies, _gen, copy_bandwidth, graph_time, make_weight  # noqa: E402
from bench.tile_sweep import Winners, add_shape_args, chosen_shapes, time_tiles  # noqa: E402


def candidates(m: int, n: int, k: int, rings: tuple[int, ...] = (0,), regs: tuple[int, ...] = (0,),
               asyncs: tuple[bool, ...] = (False,)) -> list:
    """wgmma tiles (SkinnyConfig: BLOCK_N, 128, BLOCK_M, split, warps, 1, ring): 64 rows of W per warpgroup and
    repeat, x's rows padded (or half that from 16 rows), K splits leaving >= 4 groups each; x through registers
    (ring 0) or copied `ring` groups at a time (cp.async), where that many fit the slices; registers capped at
    each of `regs` (0: the compiler's count); with a ring of two or more, each MMA waited at once or one left in
    flight (`asyncs`)."""
    from hinfer.ops.triton.linear_int4_wgmma import x_ring_groups
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import mma_block_m

    padded = mma_block_m(m)
    out = []
    for block_m, (block_n, warps), split, ring, max_regs, async_mma in itertools.product(
        dict.fromkeys((padded, max(8, padded // 2))), ((64, 4), (128, 4), (128, 8), (256, 8)), (1, 2, 4), rings, regs,
        asyncs,
    ):
        if n % block_n or k // 128 // split < 4 or x_ring_groups(ring, k // 128, split) != ring:
            continue
        if async_mma and ring < 2:  # a chunk's last MMA is waited for: one group a chunk overlaps nothing
            continue
        if split > 1 and (n // block_n) * split * -(-m // block_m) > 2 * 132:  # splits only to fill the SMs
            continue
        out.append(SkinnyConfig(block_n, 128, block_m, split, warps, 1, ring, max_regs=max_regs, async_mma=async_mma))
    return out


def main() -> None:
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
    from hinfer.ops.triton.tiles.forms import INT4_WGMMA
    from hinfer.ops.triton.tiles.linear import mma_config, wgmma_config, wgmma_swept_faster

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--tiles", type=Path, help="write the winning wgmma entries here (HINFER_TILES form)")
    ap.add_argument("--margin", type=float, default=0.03, help="how much faster than mma.sync an entry must be")
    ap.add_argument("--rings", default="0", help="x's groups per cp.async chunk to try (0: x through registers)")
    ap.add_argument("--regs", default="0", help="register caps to try (maxnreg; 0: the compiler's count)")
    ap.add_argument("--async", dest="asyncs", default="0",
                    help="with a ring of two or more: 0 each MMA waited at once, 1 one left in flight while the next "
                         "group unpacks; a comma list tries both")
    ap.add_argument("--near", action="store_true",
                    help="only tiles with the packaged tile's blocks, warps and split (the ring, cap and waits vary)")
    a = ap.parse_args()
    bw = copy_bandwidth()
    g = _gen(4)
    found = Winners(INT4_WGMMA, a.margin, a.json, a.tiles)
    for name, n, k in chosen_shapes(a):
        w, nbytes = make_weight("int4-mma", n, k, g)
        weights = _copies(w, nbytes)
        for m in (int(v) for v in a.ms.split(",")):
            x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
            want = (x.float() @ w.dequantize(torch.bfloat16).float().t())
            mma_t = graph_time(lambda wt, x=x: int4_mma_matmul(x, wt), weights)
            path_t = graph_time(lambda wt, x=x: wt.matmul(x), weights)  # what decode runs today (a8, wgmma or mma)
            cands = candidates(m, n, k, tuple(int(v) for v in a.rings.split(",")), tuple(int(v) for v in a.regs.split(",")),
                               tuple(bool(int(v)) for v in a.asyncs.split(",")))
            if a.near:  # the packaged tile's blocks, warps and split: only the ring, cap and waits vary
                p = wgmma_config(m, n, k)
                cands = [c for c in cands if (c.block_n, c.block_m, c.split_k, c.num_warps)
                         == (p.block_n, p.block_m, p.split_k, p.num_warps)]  # fmt: skip
            if wgmma_swept_faster(m, n, k):  # the packaged tile first: the others are timed against it
                cands = [wgmma_config(m, n, k), *(c for c in cands if c != wgmma_config(m, n, k))]

            def measure(cfg, x=x, want=want, w=w, weights=weights):
                got = int4_wgmma_matmul(x, w, cfg=cfg).float()  # checked before it is timed
                rel = ((got - want).norm() / want.norm()).item()
                if not rel < 1e-2:
                    raise ValueError(f"wrong result: rel L2 {rel:.3g}")
                return graph_time(lambda wt: int4_wgmma_matmul(x, wt, cfg=cfg), weights)

            timed = time_tiles(cands[0], cands[1:], measure, f"{name} M={m}") if cands else None
            if timed is None:
                continue
            best_t, best = min(timed, key=lambda t: t[0])
            print(f"{name:8s} M={m:<3d} mma.sync {mma_config(m, n, k)} {mma_t * 1e6:7.1f} us {nbytes / mma_t / bw:6.1%}"
                  f"   wgmma {best} {best_t * 1e6:7.1f} us {nbytes / best_t / bw:6.1%}  ({mma_t / best_t:.2f}x; the first "
                  f"tile tried {timed[0][0] * 1e6:.1f} us; the packaged path {path_t * 1e6:.1f} us)",
                  flush=True)  # fmt: skip
            found.add({"shape": name, "n": n, "k": k, "m": m, "mma_us": mma_t * 1e6, "path_us": path_t * 1e6,
                       "mma_tile": asdict(mma_config(m, n, k)), "wgmma_us": best_t * 1e6, "wgmma_tile": asdict(best),
                       "bytes": nbytes, "copy_bw": bw, "all": [(t * 1e6, asdict(c)) for t, c in timed]},
                      n, k, m, mma_t, best_t, best)  # fmt: skip
        del w, weights
        torch.cuda.empty_cache()
    found.print_lines("the warpgroup-MMA kernel's wins")

if __name__ == "__main__":
    main()
