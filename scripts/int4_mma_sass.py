"""Compile the Gluon int4 mma kernel for sm_90 (no GPU needed) and count SASS instructions per weight in its
main loop.

    PYTHONPATH=$PWD python scripts/int4_mma_sass.py                 # default tiles
    PYTHONPATH=$PWD python scripts/int4_mma_sass.py --block-n 256 --zero --dump /tmp/mma.sass
"""

from __future__ import annotations

import argparse
import sys

from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_loops, sass_of
from hinfer.ops.triton.linear_int4_mma import int4_mma_variant


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--block-m", type=int, default=8)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--split-k", type=int, default=1)
    ap.add_argument("--depth", type=int, default=2, choices=(2, 4), help="loop unroll: depth - 1 groups in flight")
    ap.add_argument("--zero", action="store_true", help="asymmetric (zero points)")
    ap.add_argument("--rows", action="store_true", help="read hinfer.quant.int4's row layout (no re-layout)")
    ap.add_argument("--fma-offset", action="store_true", help="subtract 128 + z per weight (bf16x2 fma) instead")
    ap.add_argument("--dump", help="write the SASS here")
    a = ap.parse_args(argv)
    _, fn, sig, cex, warps = int4_mma_variant(a.block_n, a.block_m, a.split_k, a.warps, a.zero, not a.fma_offset,
                                           a.depth, a.rows)
    k = compile_gluon_sm90(fn, sig, cex, warps)
    sass = sass_of(k)
    if a.dump:
        open(a.dump, "w").write(sass)
    weights = a.block_n * 128 * a.depth // (32 * warps)  # per thread per loop iteration (depth 128-groups)
    print(resources(k), f"weights per thread per iteration {weights}")
    for c in sass_loops(sass):
        n = sum(c.values())
        print(f"loop: {n} instructions, {n / weights:.2f} per weight: {sorted(c.items(), key=lambda x: -x[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
