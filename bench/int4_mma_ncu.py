"""One int4 tensor-core matmul at a 27B shape (or a packaged config's), launched a few times eagerly: the target for Nsight Compute, to
see where the kernel stalls (bench/int4_mma_tiles.py times it; this only runs it).

    ncu --kernel-name int4_mma_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \\
        python bench/int4_mma_ncu.py --shape gate_up --m 1 --tile 128,8,2,4,2,4
    (scripts/gpu_ncu_int4.sh runs it for the packaged tiles at M = 1 and 8; --wgmma: the warpgroup-MMA kernel,
    whose kernel name is int4_wgmma_kernel)

--tile: BLOCK_N, BLOCK_M, split-K, warps, depth[, ring[, fma_offset 0/1]]; default: the packaged tile.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.linear_kernels import (  # noqa: E402
    PROXY_SHAPES,
    SHAPES,
    _gen,
    config_shapes,  # noqa: E402
    make_weight,
)


def main() -> None:
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.ops.triton.tiles.linear import mma_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="gate_up", help="a projection's name (qkv, gdn_in, gate_up, o_proj, down) or a MoE "
                    "layer's selected experts as one matrix (linear_kernels.PROXY_SHAPES)")  # fmt: skip
    ap.add_argument("--config", help="a packaged config (e.g. qwen3.6-35b-a3b): its shapes instead of the 27B's")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--tile", help="BLOCK_N,BLOCK_M,split,warps,depth[,ring[,fma_offset]]")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--wgmma", action="store_true", help="the warpgroup-MMA kernel (int4_wgmma_kernel) instead, at "
                    "its packaged tile or --tile (8-64 rows)")  # fmt: skip
    ap.add_argument("--rows", action="store_true", help="the weights in hinfer.quant.int4's row layout (the routed "
                    "experts' own) instead of fragment order")  # fmt: skip
    a = ap.parse_args()
    shapes = (config_shapes(a.config) if a.config else [s for s in SHAPES if s[0] != "lm_head"]) + PROXY_SHAPES
    if a.shape not in [s[0] for s in shapes]:
        ap.error(f"--shape: one of {', '.join(s[0] for s in shapes)}")
    _, n, k = next(s for s in shapes if s[0] == a.shape)
    w, _ = make_weight("int4-rows-mma" if a.rows else "int4-mma", n, k, _gen(4))
    x = torch.randn(a.m, k, device="cuda").bfloat16()
    if a.tile:
        v = [int(t) for t in a.tile.split(",")]
        cfg = SkinnyConfig(v[0], 128, v[1], v[2], v[3], v[4], *(v[5:6] or [0]), *(bool(t) for t in v[6:7]))
    else:
        cfg = mma_config(a.m, n, k)
    if a.wgmma:
        from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul
        from hinfer.ops.triton.tiles.linear import wgmma_config

        cfg = cfg if a.tile else wgmma_config(a.m, n, k)  # its tiles: depth 1, ring = x's groups per chunk
        run = int4_wgmma_matmul
    else:
        run = int4_mma_matmul
    print(f"{a.shape} N={n} K={k} M={a.m} {cfg}", flush=True)
    for _ in range(a.launches):
        run(x, w, cfg=cfg)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
