"""Linear kernel families and their heuristics: the skinny (decode) kernel per weight format (and the fp8 W8A8
twins), the int4 tensor-core kernel (linear_int4_mma) and the prefill GEMMs (linear_gemm). Keys: (family,
N out features, K in features, M bucket of x's rows). The shapes (N, K) of Qwen3.6-27B:

    5120 -> 14336  attention qkv (24*256*2 + 2*4*256)      6144 -> 5120   o_proj, GDN out_proj
    5120 -> 16384  GDN in_proj qkv+z (b/a rows kept bf16)   17408 -> 5120  down_proj
    5120 -> 16480  GDN in_proj fused (all rows quantized)   5120 -> 248320 lm_head (bf16)
    5120 -> 34816  MLP gate_up
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hinfer.ops.triton.common import GROUP, num_sms
from hinfer.ops.triton.tiles.forms import (
    BF16,
    FP8_BLOCK,
    FP8_MMA,
    FP8_ROW,
    GEMM,
    GEMM_PROMOTE,
    INT4,
    INT4_A8,
    INT4_MMA,
    INT4_WGMMA,
    GemmConfig,
    SkinnyConfig,
)
from hinfer.ops.triton.tiles.table import TABLE, Family, lookup, m_bucket

QGROUP = GROUP  # int4 group and fp8 block edge along K: every grouped kernel iteration stays inside one group
SKINNY_MAX_M = {BF16: 16, FP8_ROW: 64, FP8_BLOCK: 64, INT4: 64}  # above: cuBLAS / the prefill GEMMs


def pow2_at_most(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def split_for(n: int, m: int, k: int, block_n: int, block_m: int, block_k: int, sms: int) -> int:
    """Split K until the grid covers the SMs ~4 times, keeping >= 4 K-tiles per split."""
    progs = -(-n // block_n) * -(-m // block_m)
    if progs >= 2 * sms:
        return 1
    k_tiles = -(-k // block_k)
    return pow2_at_most(max(1, min(-(-4 * sms // progs), k_tiles // 4, 16)))


def heuristic_config(fmt: str, m: int, n: int, k: int, sms: int) -> SkinnyConfig:
    """Enough programs to cover every SM a few times, each streaming a [BLOCK_N, K/split] slab of W once.

    Sizes follow the sm_90 SASS (instructions per weight byte in the loop, registers, shared memory; see
    docs/quantization.md): int4 wants wide tiles to amortize the per-step overhead over the unpacking."""
    grouped = fmt in (FP8_BLOCK, INT4)
    if m == 1 and fmt == INT4:
        # CUDA-core GEMV on the packed words (linear_int4_gemv): whole groups per step, next step prefetched
        block_n = 128
        split = split_for(n, m, k, block_n, 1, QGROUP, sms)
        while split > 1 and -(-k // QGROUP) % split:
            split //= 2  # every split takes the same number of groups: no masked loads
        return SkinnyConfig(block_n, QGROUP, 1, split, 4, 5)
    if m == 1:
        # CUDA-core GEMV: an fp32 [BLOCK_N, BLOCK_K] accumulator, reduced once at the end. fp8: 8 warps of 16 rows,
        # the shape of every 27B winner of the one-row sweep (H100, 2026-12-05: more loads in flight; the 27B fp8
        # at one lane +9.7% with them), where 32 rows on 4 warps won none
        block_m, block_n, block_k, warps, stages = 1, 32, QGROUP if grouped else 256, 4, 3
        if fmt in (FP8_ROW, FP8_BLOCK):
            block_n, warps = 16, 8
    else:
        # tensor cores: unpacking int4 on CUDA cores is already most of the work at M > 1
        block_m = max(16, 1 << (m - 1).bit_length())
        block_k = QGROUP
        if fmt == BF16:
            block_n, stages = (64, 3) if block_m <= 16 else (128, 3)
        else:
            block_n, stages = 128, 4
        warps = 4 if block_m <= 16 else 8
    block_k = min(block_k, max(16, 1 << (k - 1).bit_length()))
    split = split_for(n, m, k, block_n, block_m, block_k, sms)
    return SkinnyConfig(block_n, block_k, block_m, split, warps, stages)


def _skinny_heuristic(fmt: str, a8: bool, m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    cfg = heuristic_config(fmt, m, n, k, num_sms() if sms is None else sms)
    if a8 and cfg.block_k != QGROUP:  # W8A8 quantizes x per 128-group inside the K loop
        cfg = SkinnyConfig(cfg.block_n, QGROUP, cfg.block_m, cfg.split_k, cfg.num_warps, cfg.num_stages)
    return cfg


def _skinny_fits(cfg: SkinnyConfig, m: int, n: int, k: int) -> bool:
    """The GEMV tile (block_m 1) takes one row only; a tensor-core tile holds the rows up to 16."""
    return (cfg.block_m > 1 or m == 1) and cfg.block_m >= min(m, 16)


SKINNY: dict[str, Family[SkinnyConfig]] = {
    f"{fmt}-a8" if a8 else fmt: Family(
        f"{fmt}-a8" if a8 else fmt, functools.partial(_skinny_heuristic, fmt, a8), _skinny_fits
    )
    for fmt, a8 in ((BF16, False), (FP8_ROW, False), (FP8_BLOCK, False), (INT4, False), (FP8_ROW, True),
                    (FP8_BLOCK, True))
}  # fmt: skip


def skinny_config(fmt: str, m: int, n: int, k: int, a8: bool = False, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one skinny-kernel call; `a8` (fp8 W8A8 decode): the `-a8` family, BLOCK_K at the 128-group."""
    return lookup(SKINNY[f"{fmt}-a8" if a8 else fmt], m, n, k, sms=sms)


def mma_block_m(m: int) -> int:
    """The MMA's N (rows of x, padded): 8, 16, 32 or 64."""
    return max(8, 1 << (m - 1).bit_length())


def _mma_heuristic(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """The shape of the 27B winners: BLOCK_N 128 (256 from 32 rows of x), 8 warps (one 16-row stripe each) at
    one row and from 32 rows, 4 between; split-K as _mma_split says; loop depth 2 (deeper rarely paid)."""
    block_m = mma_block_m(m)
    sms = num_sms() if sms is None else sms
    block_n = 256 if block_m >= 32 and n % 256 == 0 else 128 if n % 128 == 0 else 64
    warps = min(block_n // 16, 8 if m == 1 or block_m >= 32 else 4)
    return SkinnyConfig(block_n, GROUP, block_m, _mma_split(n // block_n, m, k, sms, 0.5), warps, 2)


def _mma_split(tiles: int, m: int, k: int, sms: int, weight_bytes: float) -> int:
    """Split-K towards ~5 programs per SM while every split keeps >= 4 groups and the fp32 partials (8 * split * M
    * N bytes, written and read) stay under ~20% of the weight bytes (weight_bytes per weight)."""
    groups, split = k // GROUP, 1
    while tiles * split * 2 <= 5 * sms and groups // (split * 2) >= 4 and 8 * split * 2 * m <= 0.2 * k * weight_bytes:
        split *= 2
    return split


def _mma_fits(cfg: SkinnyConfig, m: int, n: int, k: int) -> bool:
    return cfg.block_m <= mma_block_m(m) and n % cfg.block_n == 0  # fewer rows per program: more programs


# tuned at M = 1, 8, 16, 32: M = 2 takes M = 8's tile (fill_up)
INT4_MMA_TILES: Family[SkinnyConfig] = Family(INT4_MMA, _mma_heuristic, _mma_fits, fill_up=True)


def mma_config(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one int4 tensor-core call (linear_int4_mma.int4_mma_matmul)."""
    return lookup(INT4_MMA_TILES, m, n, k, sms=sms)


def _fp8_mma_heuristic(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """Not yet swept: BLOCK_N 128 (64 where N needs it), one 16-row stripe per warp (two stripes a warp spilled on
    4 warps at sm_90), split-K as _mma_split says, loop depth 2."""
    block_m = mma_block_m(m)
    sms = num_sms() if sms is None else sms
    block_n = 128 if n % 128 == 0 else 64 if n % 64 == 0 else 16
    return SkinnyConfig(block_n, GROUP, block_m, _mma_split(n // block_n, m, k, sms, 1.0), min(8, block_n // 16), 2)


def _fp8_mma_fits(cfg: SkinnyConfig, m: int, n: int, k: int) -> bool:
    return cfg.block_m <= mma_block_m(m) and n % cfg.block_n == 0 and cfg.ring == 0


FP8_MMA_TILES: Family[SkinnyConfig] = Family(FP8_MMA, _fp8_mma_heuristic, _fp8_mma_fits, fill_up=True)


def fp8_mma_config(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one fp8 tensor-core call (linear_fp8_mma.fp8_mma_matmul)."""
    return lookup(FP8_MMA_TILES, m, n, k, sms=sms)


def fp8_mma_swept_faster(m: int, n: int, k: int) -> bool:
    """Whether a sweep found the fp8 tensor-core kernel faster than the fp8 skinny paths at this shape and M bucket
    (bench/fp8_mma.py --tiles writes an entry only where it won)."""
    return (FP8_MMA, n, k, m_bucket(m)) in TABLE


def _wgmma_heuristic(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """The shape of the 27B winners (bench/int4_wgmma.py): two warpgroups of 64 rows of W (BLOCK_N 128), x's rows
    padded, K split until about two programs per SM while every split keeps >= 4 groups."""
    sms = num_sms() if sms is None else sms
    block_n = 128 if n % 128 == 0 else 64
    tiles, groups, split = n // block_n, k // GROUP, 1
    while tiles * split * 2 <= 2 * sms and groups // (split * 2) >= 4:
        split *= 2
    return SkinnyConfig(block_n, GROUP, mma_block_m(m), split, block_n // 16, 1)


INT4_WGMMA_TILES: Family[SkinnyConfig] = Family(INT4_WGMMA, _wgmma_heuristic, _mma_fits)


def wgmma_config(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one int4 warpgroup-MMA call (linear_int4_wgmma.int4_wgmma_matmul)."""
    return lookup(INT4_WGMMA_TILES, m, n, k, sms=sms)


def wgmma_swept_faster(m: int, n: int, k: int) -> bool:
    """Whether a sweep found the warpgroup-MMA kernel faster than the mma.sync one at this shape and M bucket:
    the sweep (bench/int4_wgmma.py) writes an entry only where it won."""
    return (INT4_WGMMA, n, k, m_bucket(m)) in TABLE


def _a8_heuristic(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """The bf16 int4 kernel's tile (the int4 x int8 kernel streams it through its ring, at least 2 slots), x
    quantized in each program (x_ahead, for this kernel x quantized ahead in its own launch, off)."""
    return replace(mma_config(m, n, k, sms), x_ahead=False)


def _a8_fits(cfg: SkinnyConfig, m: int, n: int, k: int) -> bool:
    """8 rows of x a tile with x quantized in each program (up to 8 rows); with x quantized ahead, 8-32 rows a
    program (linear_int4_a8.a8_rows_fit)."""
    if cfg.x_ahead:
        return cfg.block_m in (8, 16, 32) and cfg.block_m <= mma_block_m(m) and n % cfg.block_n == 0
    return cfg.block_m == 8 and m <= 8 and n % cfg.block_n == 0


INT4_A8_TILES: Family[SkinnyConfig] = Family(INT4_A8, _a8_heuristic, _a8_fits)


def a8_config(m: int, n: int, k: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one int4 x int8 call (linear_int4_a8.int4_a8_matmul)."""
    return lookup(INT4_A8_TILES, m, n, k, sms=sms)


def a8_swept_faster(m: int, n: int, k: int) -> bool:
    """Whether a sweep found the int4 x int8 kernel faster than the bf16 int4 kernel's packaged tile at this shape
    and M bucket (bench/int4_mma_tiles.py --a8 writes an entry only where it won)."""
    return (INT4_A8, n, k, m_bucket(m)) in TABLE


# Prefill GEMMs (int4 W4A16 / W4A8, fp8 W8A8): 128x128 tiles, 8 warps. Promoting each K-step's partial
# product (W4A8, fp8 blocks) keeps a second [BM, BN] fp32 accumulator live, so those take BLOCK_K 64 to stay
# in registers.
_GEMM_TILE = GemmConfig(block_m=128, block_n=128, block_k=128, group_m=8, num_warps=8, num_stages=3)
_PROMOTE_TILE = GemmConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4)
GEMMS: dict[bool, Family[GemmConfig]] = {
    False: Family(GEMM, lambda m, n, k: _GEMM_TILE, max_m=1 << 16),
    True: Family(GEMM_PROMOTE, lambda m, n, k: _PROMOTE_TILE, max_m=1 << 16),
}


def gemm_config(m: int, n: int, k: int, promote: bool) -> GemmConfig:
    return lookup(GEMMS[promote], m, n, k)
