"""Tiles that issue a program's whole weight slice before its PDL wait, as HINFER_TILES entries.

Under programmatic dependent launch a matmul's programs start while the kernel before them runs and copy their
first RING - 1 groups of weights into shared memory before they wait for it (nothing writes weights). After a
latency-bound kernel (the fused GDN step, decode attention: a few us on a fraction of the SMs) the projection that
follows could have all of its bytes on the way by then, not the first few groups: the out projections at one row
(GDN out_proj and attention o_proj share a shape) take 4-6 groups a program and issue 1-3 ahead. This writes the
packaged one-row tile of each named shape with its ring grown to the program's groups + 1 (the cp.async ring of
the int4 x int8 kernel, or of the bf16 int4 kernel in place of its register look-ahead), for an A/B in the decode
graph (`hinfer bench ... ` with and without HINFER_TILES): a kernel timed alone cannot show it, since the kernel
before it there is its own previous copy.

    python bench/ring_ahead_tiles.py --out rings.json [--shapes out|in|all] [--models 27b,35b,122b] [--m 1|8]
                                      [--check]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.ops.triton.common import GROUP  # noqa: E402
from hinfer.ops.triton.linear_int4_a8 import SMEM_LIMIT, A8Shape  # noqa: E402
from hinfer.ops.triton.tiles.forms import INT4_A8, INT4_MMA  # noqa: E402
from hinfer.ops.triton.tiles.table import TABLE, entry, write  # noqa: E402

# (hidden, attention / GDN value width = the out projections' K, in projections' rows (N): qkv, GDN in_proj)
MODELS = {"27b": (5120, 6144, (14336, 16384)), "35b": (2048, 4096, (9216, 12288)), "122b": (3072, 8192, (17408, 20480))}
RING_SMEM_CAP = 100 * 1024  # bytes of ring a program may take (two programs an SM still fit beside the others)


def shapes(models: list[str], which: str) -> list[tuple[int, int]]:
    """(N, K) of the chosen projections at one row: `out` the out projections, `in` the in projections, `all`."""
    out = []
    for name in models:
        hidden, width, ins = MODELS[name]
        if which in ("out", "all"):
            out.append((hidden, width))
        if which in ("in", "all"):
            out += [(n, hidden) for n in ins]
    return out


def ring_ahead(n: int, k: int, m: int = 1) -> tuple[str, object] | None:
    """(family, tile) of the packaged entry of (N, K) at M bucket m with its whole slice issued ahead, or None
    where the shape has no entry there or the ring would not fit."""
    for family in (INT4_A8, INT4_MMA):  # the int4 x int8 entry is the one the dispatcher takes where it exists
        tile = TABLE.get((family, n, k, m))
        if tile is None:
            continue
        groups = -(-(k // GROUP) // tile.split_k)
        grown = replace(tile, ring=groups + 1)
        ring_bytes = grown.ring * tile.block_n * (64 + 2 + 1)
        if ring_bytes > RING_SMEM_CAP:
            return None
        if family == INT4_A8 and A8Shape.of(m, k, grown).smem_bytes(tile.block_n, True) > SMEM_LIMIT:
            return None
        return family, grown
    return None


def check(family: str, n: int, k: int, m: int, tile) -> float:
    """On the GPU: the grown tile's output against the packaged tile's at m rows (the ring's depth changes when
    bytes arrive, not the arithmetic: expected bit for bit); -> the largest difference."""
    import torch

    from bench.linear_kernels import make_weight
    from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul, x_staged_choice

    g = torch.Generator(device="cuda").manual_seed(0)
    w, _ = make_weight("int4-a8", n, k, g)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    packaged = TABLE[(family, n, k, m)]
    if family == INT4_MMA:  # x staged as the decode stages it (HINFER_X_STAGED)
        packaged, tile = x_staged_choice(packaged, k, m == 1), x_staged_choice(tile, k, m == 1)
    fn = int4_a8_matmul if family == INT4_A8 else int4_mma_matmul
    want, got = fn(x, w, cfg=packaged), fn(x, w, cfg=tile)
    return (want.float() - got.float()).abs().max().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="the HINFER_TILES file to write")
    ap.add_argument("--shapes", choices=["out", "in", "all"], default="out")
    ap.add_argument("--models", default="27b,35b,122b")
    ap.add_argument("--m", type=int, default=1, help="the M bucket (rows of x: lanes at decode), a power of two")
    ap.add_argument("--check", action="store_true", help="on a GPU: each grown tile against the packaged one")
    a = ap.parse_args()
    entries = []
    for n, k in shapes(a.models.split(","), a.shapes):
        got = ring_ahead(n, k, a.m)
        if got is None:
            print(f"  ({n}, {k}): no entry at M={a.m}, or its ring would not fit: left as packaged")
            continue
        family, tile = got
        print(f"  {family} ({n}, {k}) M={a.m}: ring {TABLE[(family, n, k, a.m)].ring} -> {tile.ring}  {tile}")
        if a.check:
            diff = check(family, n, k, a.m, tile)
            print(f"    against the packaged tile: largest difference {diff:.3g}")
            if diff != 0.0:
                raise SystemExit(f"({n}, {k}): the grown tile's output differs from the packaged one's")
        entries.append(entry(family, n, k, a.m, tile))
    write(a.out, entries)
    print(f"{len(entries)} entries -> {a.out}")


if __name__ == "__main__":
    main()
