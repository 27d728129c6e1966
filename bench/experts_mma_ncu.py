"""One int4 tensor-core experts launch (gate_up or down) at a Qwen3.5 MoE shape and token count, launched a few
times eagerly: the target for Nsight Compute, to see where the routed experts stall at one token (their step
profile puts them at 12-35% of the selected bytes' floor; bench/experts_mma_tiles.py times them, this only runs
them). Nsight Compute serialises kernels, so its duration is the launch's own, without the programmatic
dependent launch overlap a decode step's profile folds into it.

    ncu --kernel-name int4_mma_experts_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        --section WarpStateStats --section Occupancy python bench/experts_mma_ncu.py --model 35b --proj down
    (scripts/gpu_ncu_int4.sh runs it for the packaged tiles at one token)

--tile: BLOCK_N, split-K, warps, depth[, ring slots]; default: the packaged tile.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.experts_mma_tiles import BM, Routing, laid_out  # noqa: E402
from bench.moe_kernels import MODELS, _random_int4  # noqa: E402


def main() -> None:
    from hinfer.ops.triton.moe_int4_mma import experts_mma
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.moe import experts_mma_tile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="35b", choices=sorted(MODELS))
    ap.add_argument("--proj", default="gate_up", choices=["gate_up", "down"])
    ap.add_argument("--t", type=int, default=1, help="tokens (pairs = tokens x (top k + the folded shared expert))")
    ap.add_argument("--tile", help="BLOCK_N,split,warps,depth[,ring]: ring > 1 streams the words through a cp.async ring")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layout", choices=["rows", "groups", "stripes"], default="rows",
                    help="the experts as stored (bench/experts_mma_tiles.py --layout)")
    a = ap.parse_args()
    m = MODELS[a.model]
    e, k, h, i = m["e"] + 1, m["k"] + 1, m["h"], m["i"]
    r = Routing(a.t, k, e, torch.Generator().manual_seed(a.seed))
    n, kk = (2 * i, h) if a.proj == "gate_up" else (h, i)
    w = laid_out(_random_int4(e, n, kk, False), a.layout, a.proj == "gate_up")
    # the gate_up writes silu(gate) * up [pairs, I], the down reads it
    x = torch.randn(a.t, h, device="cuda").bfloat16() if a.proj == "gate_up" else \
        torch.randn(a.t * k, i, device="cuda").bfloat16()  # fmt: skip
    y = torch.empty(a.t * k, n // 2 if a.proj == "gate_up" else n, device="cuda", dtype=torch.bfloat16)
    if a.tile:
        bn, split, warps, depth, *ring = (int(v) for v in a.tile.split(","))
        cfg = SkinnyConfig(bn, 128, BM, split, warps, depth, *ring)
    else:
        cfg = experts_mma_tile(a.t * k, n, kk, r.blocks)
    print(f"{a.model} {a.proj} N={n} K={kk} T={a.t} pairs={a.t * k} {a.layout} {cfg}", flush=True)
    for _ in range(a.launches):
        if a.proj == "gate_up":
            experts_mma(x, w, y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct, xdiv=k, cfg=cfg,
                        act=True)  # fmt: skip
        else:
            experts_mma(x, w, y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct, xdiv=1, tw=r.tw,
                        cfg=cfg)  # fmt: skip
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
