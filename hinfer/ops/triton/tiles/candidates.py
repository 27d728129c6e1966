"""Candidate tiles of the linear sweeps (bench/linear_kernels.py --tune): the skinny kernel's and the prefill
GEMMs', around the heuristics of tiles/linear.py."""

from __future__ import annotations

from hinfer.ops.triton.tiles.forms import FP8_BLOCK, FP8_ROW, INT4, GemmConfig, SkinnyConfig
from hinfer.ops.triton.tiles.linear import QGROUP, split_for


def skinny_candidates(fmt: str, m: int, n: int, k: int, sms: int = 132) -> list[SkinnyConfig]:
    """The sweep of `--tune` (~60 configs): tile sizes, split-K around the covering split, warps, stages."""
    grouped = fmt in (FP8_BLOCK, INT4)
    out: list[SkinnyConfig] = []
    if m == 1 and fmt == INT4:
        groups = -(-k // QGROUP)
        for bn, bk, warps in ((64, 128, 4), (128, 128, 4), (128, 128, 8), (256, 128, 4), (256, 128, 8)):
            s0 = split_for(n, m, k, bn, 1, QGROUP, sms)
            for split in sorted({max(1, s0 // 2), s0, 2 * s0}):
                if groups % (split * bk // QGROUP) == 0:
                    for stages in (3, 5, 8):
                        out.append(SkinnyConfig(bn, bk, 1, split, warps, stages))
        return out
    if m == 1:
        for bn in (16, 32, 64):
            for bk in (QGROUP,) if grouped else (128, 256):
                s0 = split_for(n, m, k, bn, 1, bk, sms)
                for split in sorted({s0, 2 * s0}):
                    for warps in (4, 8):
                        out.append(SkinnyConfig(bn, bk, 1, split, warps, 3))
        if fmt in (FP8_ROW, FP8_BLOCK):  # the codes read as 32-bit words and turned by their bits
            for bn in (16, 32, 64):
                for bk in (128,) if grouped else (256, 512):
                    s0 = split_for(n, m, k, bn, 1, bk, sms)
                    for split in sorted({s0, 2 * s0}):
                        for warps, stages in ((4, 3), (8, 3)):
                            out.append(SkinnyConfig(bn, bk, 1, split, warps, stages, words=True))
    bm = max(16, 1 << (m - 1).bit_length())
    for bn in (32, 64, 128, 256):
        for bk in (64, QGROUP):
            s0 = split_for(n, m, k, bn, bm, bk, sms)
            for split in sorted({s0, 2 * s0}):
                for warps, stages in ((4, 3), (4, 4), (8, 3), (8, 4)):
                    if bn * bm > 128 * 64 and warps == 4 or (bn == 256 and bk == 64) or bn * bk < 64 * 64:
                        continue  # spills / too little work per step
                    out.append(SkinnyConfig(bn, bk, bm, split, warps, stages))
    return out


def gemm_candidates() -> list[GemmConfig]:
    out = []
    for bm, bn in ((64, 128), (128, 128), (128, 256), (256, 128)):
        for bk in (64, 128):
            for warps in (4, 8):
                for stages in (3, 4, 5):
                    out.append(GemmConfig(bm, bn, bk, 8, warps, stages))
    return out
