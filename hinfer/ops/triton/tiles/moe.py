"""MoE kernel families and their heuristics (sweeps: bench/moe_kernels.py --sweep).

- moe_bf16 / moe_int4 / moe_fp8: the routed experts' Triton kernels (moe.py) per weight format; key N = I
  (the expert intermediate size), K = H (hidden), M = T tokens. The heuristic also reads top k and the expert
  count.
- moe_int4_mma: int4 experts at decode sizes on tensor cores (moe_int4_mma.py); key N, K of one expert GEMM,
  M = (token, expert) pairs.

The Qwen3.5 MoE shapes: 256 experts, top 8; 35B-A3B H=2048, I=512; 122B-A10B H=3072, I=1024.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from hinfer.ops.triton.common import GROUP, num_sms
from hinfer.ops.triton.tiles.forms import (
    BF16,
    GEMV,
    INT4,
    MOE_FP8_MMA,
    MOE_INT4_MMA,
    MoeConfig,
    SkinnyConfig,
    Tile,
)
from hinfer.ops.triton.tiles.table import Family, lookup

FP8 = "fp8"  # the expert formats: BF16, INT4 (hinfer.quant.int4 rows), FP8 (e4m3 + scales)
_SWAP16 = Tile(16, 64, 128, 4, 4, swap=True)


def _experts_heuristic(fmt: str, t: int, i: int, h: int, top_k: int, experts: int) -> MoeConfig:
    """Paths and tiles by tokens per expert (fp8 is not tuned yet: the int4 decode tiles, the bf16 prefill
    tiles)."""
    if t == 1:
        if fmt == BF16:
            return MoeConfig(
                Tile(GEMV, 16, 256, 4, 4), Tile(GEMV, 16, 256, 4, 4), direct=True, sum_in_down=True
            )
        # 8 experts x I/32 programs for gate_up: BN = 64 would leave half the SMs idle at I = 512
        return MoeConfig(replace(_SWAP16, block_n=32), _SWAP16, direct=True)
    avg = t * top_k / experts  # pairs per expert
    if avg <= 8:  # decode and MTP verify: most experts get a handful of rows, one 16-row block
        return MoeConfig(_SWAP16, _SWAP16)
    if fmt == INT4:  # in-register unpacking: 8 warps keep the tiles off local memory (ptxas, sm_90a)
        return MoeConfig(Tile(64, 64, 64, 8, 4), Tile(64, 128, 64, 8, 4))
    # bf16 and fp8 (an e4m3 -> bf16 convert and a row scale per tile: the bf16 tiles compile without spills)
    if avg <= 48:
        return MoeConfig(Tile(64, 64, 64, 4, 4), Tile(64, 128, 64, 4, 4))
    return MoeConfig(Tile(128, 64, 64, 8, 3), Tile(128, 128, 64, 8, 3))


MOE: dict[str, Family[MoeConfig]] = {
    fmt: Family(f"moe_{fmt}", functools.partial(_experts_heuristic, fmt), max_m=1 << 16)
    for fmt in (BF16, INT4, FP8)
}


def pick_config(t: int, k: int, e: int, h: int, i: int, fmt: str = BF16) -> MoeConfig:
    """The experts' path and tiles for T tokens choosing k of E experts, hidden H, intermediate I."""
    return lookup(MOE[fmt], t, i, h, top_k=k, experts=e)


def clamp_to_shape(cfg: MoeConfig, h: int, i: int, fmt: str = BF16) -> MoeConfig:
    """Shrink tiles for small shapes (tests) and the scaled formats (int4, fp8: K-steps inside one 128-group
    or 128-column scale block): tl.dot needs every dim >= 16, GEMV tiles take any power of two."""

    def fit(tile: Tile, n: int, kdim: int) -> Tile:
        lo = 1 if tile.block_m == GEMV else 16
        bn = max(lo, min(tile.block_n, _pow2_floor(n)))
        bk = max(lo, min(tile.block_k, _pow2_floor(kdim), GROUP if fmt in (INT4, FP8) else 1 << 30))
        return replace(tile, block_n=bn, block_k=bk)

    return replace(cfg, gate_up=fit(cfg.gate_up, i, h), down=fit(cfg.down, h, i))


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def _mma_experts_heuristic(m: int, n: int, k: int, blocks: int, sms: int | None = None) -> SkinnyConfig:
    """64-row tiles when the grid (N tiles x blocks) would leave SMs idle, else 128 with 8 warps; blocks of 8
    rows (the alignment's), no split-K (the grid is experts x N tiles already), loop depth 2."""
    sms = num_sms() if sms is None else sms
    if n % 128 == 0 and (n // 128) * blocks >= sms:
        return SkinnyConfig(128, GROUP, 8, 1, 8, 2)
    return SkinnyConfig(64, GROUP, 8, 1, 4, 2)


# Buckets up to 512 pairs: decode (9 per token) and speculative verification (8 lanes x 4 tokens: 288 pairs)
MOE_INT4_MMA_TILES: Family[SkinnyConfig] = Family(
    MOE_INT4_MMA, _mma_experts_heuristic, lambda cfg, m, n, k: n % cfg.block_n == 0, max_m=512
)


def experts_mma_tile(pairs: int, n: int, k: int, blocks: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one moe_int4_mma.experts_mma call: `pairs` (token, expert) rows over `blocks` row blocks."""
    return lookup(MOE_INT4_MMA_TILES, pairs, n, k, blocks=blocks, sms=sms)


def _fp8_experts_heuristic(m: int, n: int, k: int, blocks: int, sms: int | None = None) -> SkinnyConfig:
    """64 rows on 4 warps, the weights three groups ahead, K split in powers of two until the launch has about 4
    programs an SM (one token's few blocks are otherwise too few programs to keep enough bytes in flight), at
    least two groups a split."""
    sms = num_sms() if sms is None else sms
    block_n = 64 if n % 64 == 0 else 32
    split, groups = 1, k // GROUP
    while split * 4 <= groups and blocks * (n // block_n) * split < 4 * sms:
        split *= 2
    return SkinnyConfig(block_n, GROUP, 8, split, block_n // 16, 4)


MOE_FP8_MMA_TILES: Family[SkinnyConfig] = Family(
    MOE_FP8_MMA, _fp8_experts_heuristic, lambda cfg, m, n, k: n % cfg.block_n == 0, max_m=512
)


def fp8_experts_mma_tile(pairs: int, n: int, k: int, blocks: int, sms: int | None = None) -> SkinnyConfig:
    """Tiles of one moe_fp8_mma.fp8_experts_mma call (the same buckets as the int4 experts')."""
    return lookup(MOE_FP8_MMA_TILES, pairs, n, k, blocks=blocks, sms=sms)
