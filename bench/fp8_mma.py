"""The fp8 tensor-core kernel on row-major e4m3 weights (hinfer/ops/triton/linear_fp8_mma.py) against the fp8 paths
it would replace (the CUDA-core W8A16 GEMV at one row, the Triton skinny kernel above: HINFER_FP8_MMA=0), at the
Qwen3.6-27B shapes (or a packaged config's), timed like bench/linear_kernels.py (CUDA graph over weight copies
that do not fit in L2). Prints, per shape and M, both times and their share of the copy bandwidth, the best tile
of a sweep; `--json` keeps every row. `--tiles` writes the fp8_mma entries where the best tile beats the current
path by more than --margin (HINFER_TILES form; HINFER_FP8_MMA=tuned takes the kernel exactly there) and prints
them as tuned.py lines. Tiles that spill on sm_90 are left out before timing (tile_sweep.spill_free; `--spills`
times them too): they are never packaged.

    python bench/fp8_mma.py [--ms 1,2,4,8,16,32] [--shapes qkv,gdn_in,gate_up,o_proj,down | --config NAME]
                            [--scheme channel|block] [--depths 2,4] [--json out.json] [--tiles tiles.json]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.linear_kernels import _copies, _gen, copy_bandwidth, graph_time  # noqa: E402
from bench.tile_sweep import Winners, add_shape_args, chosen_shapes, spill_free, time_tiles  # noqa: E402


def candidates(m: int, n: int, k: int, depths: tuple[int, ...] = (2, 4), sms: int = 132) -> list:
    """Tiles (SkinnyConfig: BLOCK_N, 128, BLOCK_M, split, warps, depth): one or two 16-row stripes a warp, x's
    rows padded (or half that from 16 rows), K splits leaving >= 4 groups each while the grid stays under ~8
    programs an SM; loops deeper than 2 groups only at 8 rows of x a program (registers)."""
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import mma_block_m

    padded = mma_block_m(m)
    out = []
    for block_m, (block_n, warps), split, depth in itertools.product(
        dict.fromkeys((padded, max(8, padded // 2))), ((64, 4), (128, 4), (128, 8), (256, 8)), (1, 2, 4, 8, 16),
        depths,
    ):  # fmt: skip
        if n % block_n or k // 128 // split < 4 or (depth > 2 and block_m > 8):  # deep loops only at 8 rows a block
            continue
        if split > 1 and (n // block_n) * split * -(-m // block_m) > 8 * sms:
            continue
        out.append(SkinnyConfig(block_n, 128, block_m, split, warps, depth))
    return out


def main() -> None:
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul, fp8_mma_variant
    from hinfer.ops.triton.tiles.forms import FP8_MMA
    from hinfer.ops.triton.tiles.linear import fp8_mma_config
    from hinfer.quant.fp8 import quantize_fp8

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--scheme", default="channel", choices=("channel", "block"))
    ap.add_argument("--depths", default="2,4", help="register look-ahead depths to try")
    ap.add_argument("--tiles", type=Path, help="write the winning fp8_mma entries here (HINFER_TILES form)")
    ap.add_argument("--margin", type=float, default=0.02, help="how much faster than the current path an entry must be")
    ap.add_argument("--spills", action="store_true",
                    help="also time tiles that spill on sm_90 (by default left out: they are never packaged)")
    a = ap.parse_args()
    os.environ["HINFER_FP8_MMA"] = "0"  # Fp8Weight.matmul: the current fp8 paths, the figure to beat
    bw = copy_bandwidth()
    g = _gen(4)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    found = Winners(FP8_MMA, a.margin, a.json, a.tiles)
    blocked = a.scheme == "block"
    for name, n, k in chosen_shapes(a):
        w = quantize_fp8((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16(), a.scheme)
        nbytes = w.nbytes()
        weights = _copies(w, nbytes)
        for m in (int(v) for v in a.ms.split(",")):
            x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
            want = x.float() @ w.dequantize(torch.float32).t()
            cur_t = graph_time(lambda wt, x=x: wt.matmul(x), weights)
            default = fp8_mma_config(m, n, k, sms)
            cands = candidates(m, n, k, tuple(int(v) for v in a.depths.split(",")), sms)
            if not a.spills:  # the per-M variant: one build per tile whatever the shape (N, K are arguments)
                cands = spill_free(cands, lambda c: fp8_mma_variant(c.block_n, c.block_m, c.split_k, c.num_warps,
                                                                    blocked, c.num_stages, pdl=True), f"{name} M={m}")

            def measure(cfg, x=x, want=want, w=w, weights=weights):
                got = fp8_mma_matmul(x, w.weight, w.scale, blocked, cfg=cfg).float()  # checked before timing
                rel = ((got - want).norm() / want.norm()).item()
                if not rel < 4e-3:
                    raise ValueError(f"wrong result: rel L2 {rel:.3g}")
                return graph_time(lambda wt: fp8_mma_matmul(x, wt.weight, wt.scale, blocked, cfg=cfg), weights)

            timed = time_tiles(default, cands, measure, f"{name} M={m}")
            if timed is None:
                continue
            best_t, best = min(timed, key=lambda t: t[0])
            print(f"{name:8s} M={m:<3d} current {cur_t * 1e6:7.1f} us {nbytes / cur_t / bw:6.1%}   mma default "
                  f"{timed[0][0] * 1e6:7.1f} us   best {best} {best_t * 1e6:7.1f} us {nbytes / best_t / bw:6.1%}  "
                  f"({cur_t / best_t:.2f}x)", flush=True)  # fmt: skip
            found.add({"shape": name, "n": n, "k": k, "m": m, "scheme": a.scheme, "current_us": cur_t * 1e6,
                       "mma_default_us": timed[0][0] * 1e6, "mma_default_tile": asdict(default),
                       "mma_us": best_t * 1e6, "mma_tile": asdict(best), "bytes": nbytes, "copy_bw": bw,
                       "all": [(t * 1e6, asdict(c)) for t, c in timed]}, n, k, m, cur_t, best_t, best)  # fmt: skip
        del w, weights
        torch.cuda.empty_cache()
    found.print_lines("the fp8 tensor-core kernel's wins")

if __name__ == "__main__":
    main()
