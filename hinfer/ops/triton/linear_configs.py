"""Tile configurations of the skinny (decode) and prefill linear kernels, keyed by weight format and shape.

`skinny_config(fmt, m, n, k)` returns the tuned entry for the 27B shapes when there is one, else a heuristic
pick. `python bench/linear_kernels.py --tune` on the H200 sweeps the candidates below and prints a `TUNED`
table to paste here. The shapes (N, K) of Qwen3.6-27B:

    5120 -> 14336  attention qkv (24*256*2 + 2*4*256)      6144 -> 5120   o_proj, GDN out_proj
    5120 -> 16384  GDN in_proj qkv+z (b/a rows kept bf16)   17408 -> 5120  down_proj
    5120 -> 16480  GDN in_proj fused (all rows quantized)   5120 -> 248320 lm_head (bf16)
    5120 -> 34816  MLP gate_up
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

BF16, FP8_ROW, FP8_BLOCK, INT4 = "bf16", "fp8_row", "fp8_block", "int4"
INT4_MMA = "int4_mma"  # int4 in fragment order on tensor cores (linear_int4_mma): num_stages is its loop depth
QGROUP = 128  # int4 group and fp8 block edge along K: every grouped kernel iteration stays inside one group
M_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
SKINNY_MAX_M = {BF16: 16, FP8_ROW: 64, FP8_BLOCK: 64, INT4: 64}  # above: cuBLAS / the prefill GEMMs


@dataclass(frozen=True)
class SkinnyConfig:
    block_n: int
    block_k: int
    block_m: int  # 1: CUDA-core GEMV (M == 1 only); >= 16: tensor-core tile with the M rows padded
    # int4 GEMV (block_m 1): block_k = 128 x groups per step; num_stages: depth of the TMA ring of weights
    # (without TMA: num_stages - 1 steps prefetched into registers, at most 2)
    split_k: int
    num_warps: int
    num_stages: int
    ring: int = 0  # int4_mma: groups in a cp.async shared-memory ring (0: num_stages' register look-ahead)


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


def m_bucket(m: int) -> int:
    for b in M_BUCKETS:
        if m <= b:
            return b
    return M_BUCKETS[-1]


@functools.cache
def num_sms(device_index: int = 0) -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_index).multi_processor_count
    return 4  # interpreter: keep split-K exercised but grids small


def _pow2_at_most(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


# (fmt, N, K, m_bucket) -> config. Filled from `bench/linear_kernels.py --tune` on the H200; empty entries fall
# back to the heuristic.
# Swept on the H200 (2026-11-30, `bench/linear_kernels.py --tune --formats bf16 --ms 1,8`); GDN in_proj fused
# (16480 rows) reuses the 16384-row winner. Keys: (format, N, K, M bucket).
TUNED: dict[tuple[str, int, int, int], SkinnyConfig] = {
    ("bf16", 14336, 5120, 1): SkinnyConfig(16, 256, 1, 1, 4, 3),
    ("bf16", 14336, 5120, 8): SkinnyConfig(32, 128, 16, 1, 4, 4),
    ("bf16", 16384, 5120, 1): SkinnyConfig(32, 256, 1, 1, 4, 3),
    ("bf16", 16384, 5120, 8): SkinnyConfig(32, 128, 16, 1, 4, 3),
    ("bf16", 16480, 5120, 1): SkinnyConfig(32, 256, 1, 1, 4, 3),
    ("bf16", 16480, 5120, 8): SkinnyConfig(32, 128, 16, 1, 4, 3),
    ("bf16", 5120, 6144, 1): SkinnyConfig(64, 128, 16, 4, 4, 3),
    ("bf16", 5120, 6144, 8): SkinnyConfig(64, 128, 16, 4, 4, 3),
    ("bf16", 5120, 17408, 1): SkinnyConfig(64, 128, 16, 4, 4, 3),
    ("bf16", 5120, 17408, 8): SkinnyConfig(64, 128, 16, 4, 4, 3),
    # int4 GEMV (TMA ring), swept 2026-12-01 (`--tune --formats int4 --ms 1`, asymmetric weights)
    ("int4", 14336, 5120, 1): SkinnyConfig(128, 128, 1, 2, 4, 3),
    ("int4", 16384, 5120, 1): SkinnyConfig(128, 128, 1, 2, 4, 3),
    ("int4", 16480, 5120, 1): SkinnyConfig(128, 128, 1, 2, 4, 3),
    ("int4", 34816, 5120, 1): SkinnyConfig(128, 128, 1, 2, 4, 3),
    ("int4", 5120, 6144, 1): SkinnyConfig(128, 128, 1, 8, 4, 3),
    ("int4", 5120, 17408, 1): SkinnyConfig(128, 128, 1, 8, 4, 5),
    # fp8 (per channel) and int4 at M = 8 (tensor cores), swept 2026-12-01 (`--tune --formats fp8,int4 --ms 8`)
    ("fp8_row", 14336, 5120, 8): SkinnyConfig(64, 128, 16, 4, 4, 3),
    ("int4", 14336, 5120, 8): SkinnyConfig(128, 128, 16, 8, 4, 3),
    ("fp8_row", 16384, 5120, 8): SkinnyConfig(64, 128, 16, 2, 4, 3),
    ("fp8_row", 16480, 5120, 8): SkinnyConfig(64, 128, 16, 2, 4, 3),
    ("int4", 16384, 5120, 8): SkinnyConfig(128, 128, 16, 4, 4, 3),
    ("int4", 16480, 5120, 8): SkinnyConfig(128, 128, 16, 4, 4, 3),
    ("fp8_row", 34816, 5120, 8): SkinnyConfig(64, 128, 16, 2, 4, 3),
    ("int4", 34816, 5120, 8): SkinnyConfig(64, 128, 16, 2, 4, 3),
    ("fp8_row", 5120, 6144, 8): SkinnyConfig(64, 128, 16, 8, 4, 3),
    ("int4", 5120, 6144, 8): SkinnyConfig(64, 128, 16, 8, 4, 3),
    ("fp8_row", 5120, 17408, 8): SkinnyConfig(64, 128, 16, 8, 4, 3),
    ("int4", 5120, 17408, 8): SkinnyConfig(64, 128, 16, 8, 4, 3),
    # int4 in fragment order (tensor cores; num_stages = loop depth), swept 2026-12-01
    # (`bench/int4_mma_tiles.py --ms 1,8,16,32`, asymmetric weights)
    (INT4_MMA, 14336, 5120, 1): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (INT4_MMA, 14336, 5120, 8): SkinnyConfig(256, 128, 8, 4, 4, 4),
    (INT4_MMA, 14336, 5120, 16): SkinnyConfig(128, 128, 16, 2, 4, 4),
    (INT4_MMA, 14336, 5120, 32): SkinnyConfig(256, 128, 32, 2, 8, 2),
    (INT4_MMA, 16384, 5120, 1): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (INT4_MMA, 16384, 5120, 8): SkinnyConfig(256, 128, 8, 4, 4, 4),
    (INT4_MMA, 16384, 5120, 16): SkinnyConfig(128, 128, 16, 2, 4, 4),
    (INT4_MMA, 16384, 5120, 32): SkinnyConfig(256, 128, 32, 2, 8, 2),
    (INT4_MMA, 34816, 5120, 1): SkinnyConfig(128, 128, 8, 2, 4, 2),
    (INT4_MMA, 34816, 5120, 8): SkinnyConfig(128, 128, 8, 2, 4, 2),
    (INT4_MMA, 34816, 5120, 16): SkinnyConfig(128, 128, 16, 1, 4, 2),
    (INT4_MMA, 34816, 5120, 32): SkinnyConfig(256, 128, 32, 4, 8, 2),
    (INT4_MMA, 5120, 6144, 1): SkinnyConfig(128, 128, 8, 8, 8, 2),
    (INT4_MMA, 5120, 6144, 8): SkinnyConfig(128, 128, 8, 8, 8, 2),
    (INT4_MMA, 5120, 6144, 16): SkinnyConfig(128, 128, 16, 8, 4, 2),
    (INT4_MMA, 5120, 6144, 32): SkinnyConfig(256, 128, 32, 4, 8, 2),
    (INT4_MMA, 5120, 17408, 1): SkinnyConfig(128, 128, 8, 16, 4, 2),
    (INT4_MMA, 5120, 17408, 8): SkinnyConfig(128, 128, 8, 8, 4, 4),
    (INT4_MMA, 5120, 17408, 16): SkinnyConfig(128, 128, 16, 8, 4, 2),
    (INT4_MMA, 5120, 17408, 32): SkinnyConfig(256, 128, 32, 4, 8, 2),
    # 35B-A3B and 122B-A10B dense projections (`bench/int4_mma_tiles.py --config NAME --ms 1,8`)
    (INT4_MMA, 2048, 512, 1): SkinnyConfig(128, 128, 8, 1, 4, 4),
    (INT4_MMA, 2048, 512, 8): SkinnyConfig(128, 128, 8, 1, 4, 4),
    (INT4_MMA, 1024, 2048, 1): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 1024, 2048, 8): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 2048, 4096, 1): SkinnyConfig(128, 128, 8, 8, 4, 4),
    (INT4_MMA, 2048, 4096, 8): SkinnyConfig(128, 128, 8, 8, 4, 4),
    (INT4_MMA, 12288, 2048, 1): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 12288, 2048, 8): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 9216, 2048, 1): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (INT4_MMA, 9216, 2048, 8): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 3072, 1024, 1): SkinnyConfig(128, 128, 8, 2, 4, 4),
    (INT4_MMA, 3072, 1024, 8): SkinnyConfig(128, 128, 8, 2, 4, 4),
    (INT4_MMA, 2048, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 2048, 3072, 8): SkinnyConfig(128, 128, 8, 4, 4, 4),
    (INT4_MMA, 3072, 8192, 1): SkinnyConfig(128, 128, 8, 16, 4, 4),
    (INT4_MMA, 3072, 8192, 8): SkinnyConfig(128, 128, 8, 16, 4, 4),
    (INT4_MMA, 20480, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 2),
    (INT4_MMA, 20480, 3072, 8): SkinnyConfig(128, 128, 8, 4, 4, 2),
    (INT4_MMA, 17408, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 2),
    (INT4_MMA, 17408, 3072, 8): SkinnyConfig(128, 128, 8, 4, 4, 2),
}


def _load_tuned_file() -> None:
    """HINFER_LINEAR_TUNED=path.json (written by `bench/linear_kernels.py --tune --tuned-out`) adds or overrides
    entries: tiles tuned on this GPU without editing the package."""
    path = os.environ.get("HINFER_LINEAR_TUNED")
    if not path:
        return
    for e in json.loads(Path(path).read_text()):
        TUNED[(e["fmt"], e["n"], e["k"], e["m"])] = SkinnyConfig(**e["config"])


_load_tuned_file()


def _split_for(n: int, m: int, k: int, block_n: int, block_m: int, block_k: int, sms: int) -> int:
    """Split K until the grid covers the SMs ~4 times, keeping >= 4 K-tiles per split."""
    progs = -(-n // block_n) * -(-m // block_m)
    if progs >= 2 * sms:
        return 1
    k_tiles = -(-k // block_k)
    return _pow2_at_most(max(1, min(-(-4 * sms // progs), k_tiles // 4, 16)))


def heuristic_config(fmt: str, m: int, n: int, k: int, sms: int) -> SkinnyConfig:
    """Enough programs to cover every SM a few times, each streaming a [BLOCK_N, K/split] slab of W once.

    Sizes follow the sm_90 SASS (instructions per weight byte in the loop, registers, shared memory; see
    docs/quantization.md): int4 wants wide tiles to amortize the per-step overhead over the unpacking."""
    grouped = fmt in (FP8_BLOCK, INT4)
    if m == 1 and fmt == INT4:
        # CUDA-core GEMV on the packed words (linear_int4_gemv): whole groups per step, next step prefetched
        block_n = 128
        split = _split_for(n, m, k, block_n, 1, QGROUP, sms)
        while split > 1 and -(-k // QGROUP) % split:
            split //= 2  # every split takes the same number of groups: no masked loads
        return SkinnyConfig(block_n, QGROUP, 1, split, 4, 5)
    if m == 1:
        # CUDA-core GEMV: an fp32 [BLOCK_N, BLOCK_K] accumulator, reduced once at the end
        block_m, block_n, block_k, warps, stages = 1, 32, QGROUP if grouped else 256, 4, 3
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
    split = _split_for(n, m, k, block_n, block_m, block_k, sms)
    return SkinnyConfig(block_n, block_k, block_m, split, warps, stages)


def skinny_config(fmt: str, m: int, n: int, k: int, a8: bool = False) -> SkinnyConfig:
    """Tiles for one call; `a8` (fp8 W8A8 decode) looks up `fmt + "-a8"` and keeps BLOCK_K at the 128-group."""
    cfg = TUNED.get((fmt + "-a8" if a8 else fmt, n, k, m_bucket(m)))
    if cfg is not None and (cfg.block_m > 1 or m == 1) and cfg.block_m >= min(m, 16):
        return cfg
    dev = torch.cuda.current_device() if torch.cuda.is_available() else 0
    cfg = heuristic_config(fmt, m, n, k, num_sms(dev))
    if a8 and cfg.block_k != QGROUP:
        cfg = SkinnyConfig(cfg.block_n, QGROUP, cfg.block_m, cfg.split_k, cfg.num_warps, cfg.num_stages)
    return cfg


def skinny_candidates(fmt: str, m: int, n: int, k: int, sms: int = 132) -> list[SkinnyConfig]:
    """The sweep of `--tune` (~60 configs): tile sizes, split-K around the covering split, warps, stages."""
    grouped = fmt in (FP8_BLOCK, INT4)
    out: list[SkinnyConfig] = []
    if m == 1 and fmt == INT4:
        groups = -(-k // QGROUP)
        for bn, bk, warps in ((64, 128, 4), (128, 128, 4), (128, 128, 8), (256, 128, 4), (256, 128, 8)):
            s0 = _split_for(n, m, k, bn, 1, QGROUP, sms)
            for split in sorted({max(1, s0 // 2), s0, 2 * s0}):
                if groups % (split * bk // QGROUP) == 0:
                    for stages in (3, 5, 8):
                        out.append(SkinnyConfig(bn, bk, 1, split, warps, stages))
        return out
    if m == 1:
        for bn in (16, 32, 64):
            for bk in (QGROUP,) if grouped else (128, 256):
                s0 = _split_for(n, m, k, bn, 1, bk, sms)
                for split in sorted({s0, 2 * s0}):
                    for warps in (4, 8):
                        out.append(SkinnyConfig(bn, bk, 1, split, warps, 3))
    bm = max(16, 1 << (m - 1).bit_length())
    for bn in (32, 64, 128, 256):
        for bk in (64, QGROUP):
            s0 = _split_for(n, m, k, bn, bm, bk, sms)
            for split in sorted({s0, 2 * s0}):
                for warps, stages in ((4, 3), (4, 4), (8, 3), (8, 4)):
                    if bn * bm > 128 * 64 and warps == 4 or (bn == 256 and bk == 64) or bn * bk < 64 * 64:
                        continue  # spills / too little work per step
                    out.append(SkinnyConfig(bn, bk, bm, split, warps, stages))
    return out


# Prefill GEMMs (int4 W4A16 / W4A8, fp8 W8A8): 128x128 tiles, 8 warps. Promoting each K-step's partial product
# (W4A8, fp8 blocks) keeps a second [BM, BN] fp32 accumulator live, so those take BLOCK_K 64 to stay in registers.
GEMM_DEFAULT = GemmConfig(block_m=128, block_n=128, block_k=128, group_m=8, num_warps=8, num_stages=3)
GEMM_PROMOTE = GemmConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4)


def gemm_config(m: int, n: int, k: int, promote: bool) -> GemmConfig:
    return GEMM_PROMOTE if promote else GEMM_DEFAULT


def gemm_candidates() -> list[GemmConfig]:
    out = []
    for bm, bn in ((64, 128), (128, 128), (128, 256), (256, 128)):
        for bk in (64, 128):
            for warps in (4, 8):
                for stages in (3, 4, 5):
                    out.append(GemmConfig(bm, bn, bk, 8, warps, stages))
    return out
