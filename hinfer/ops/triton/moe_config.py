"""Tile choices of the MoE expert kernels, by batch size, shape and weight format (tuned on the H200 with
`python bench/moe_kernels.py --sweep`).

The Qwen3.5 MoE shapes: 256 experts, top 8; 35B-A3B H=2048, I=512; 122B-A10B H=3072, I=1024.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hinfer.ops.triton.common import GROUP

GEMV = 1  # block_m of the T == 1 bf16 path (CUDA-core dots, no grouping)
BF16, INT4, FP8 = "bf16", "int4", "fp8"


@dataclass(frozen=True)
class Tile:
    block_m: int  # rows (pairs) per block; GEMV for the T == 1 bf16 path
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    swap: bool = False  # acc[BN, BM] = W @ X^T (decode) instead of X @ W^T


@dataclass(frozen=True)
class MoeConfig:
    gate_up: Tile  # N over I (gate and up rows both), K = H
    down: Tile  # N over H, K = I
    direct: bool = False  # T == 1 only: block b = pair b (k distinct experts), no alignment launch
    sum_in_down: bool = False  # direct only: the down kernel sums the k slots (no y, no sum launch)

    @property
    def gemv(self) -> bool:
        return self.gate_up.block_m == GEMV

    @property
    def block_m(self) -> int:
        assert self.gate_up.block_m == self.down.block_m, "both GEMMs share one alignment"
        return self.gate_up.block_m


_SWAP16 = Tile(16, 64, 128, 4, 4, swap=True)


def pick_config(t: int, k: int, e: int, h: int, i: int, fmt: str = BF16) -> MoeConfig:
    """Heuristic table; `bench/moe_kernels.py --sweep` prints the measured best per shape. `fmt`: BF16, INT4 or
    FP8 (fp8 is not tuned yet: the int4 decode tiles, the bf16 prefill tiles)."""
    if t == 1:
        if fmt == BF16:
            return MoeConfig(
                Tile(GEMV, 16, 256, 4, 4), Tile(GEMV, 16, 256, 4, 4), direct=True, sum_in_down=True
            )
        # 8 experts x I/32 programs for gate_up: BN = 64 would leave half the SMs idle at I = 512
        return MoeConfig(replace(_SWAP16, block_n=32), _SWAP16, direct=True)
    avg = t * k / e  # pairs per expert
    if avg <= 8:  # decode and MTP verify: most experts get a handful of rows, one 16-row block
        return MoeConfig(_SWAP16, _SWAP16)
    if fmt == INT4:  # in-register unpacking: 8 warps keep the tiles off local memory (ptxas, sm_90a)
        return MoeConfig(Tile(64, 64, 64, 8, 4), Tile(64, 128, 64, 8, 4))
    # bf16 and fp8 (an e4m3 -> bf16 convert and a row scale per tile: the bf16 tiles compile without spills)
    if avg <= 48:
        return MoeConfig(Tile(64, 64, 64, 4, 4), Tile(64, 128, 64, 4, 4))
    return MoeConfig(Tile(128, 64, 64, 8, 3), Tile(128, 128, 64, 8, 3))


def clamp_to_shape(cfg: MoeConfig, h: int, i: int, fmt: str = BF16) -> MoeConfig:
    """Shrink tiles for small shapes (tests) and the scaled formats (int4, fp8: K-steps inside one 128-group or
    128-column scale block): tl.dot needs every dim >= 16, GEMV tiles take any power of two."""

    def fit(tile: Tile, n: int, kdim: int) -> Tile:
        lo = 1 if tile.block_m == GEMV else 16
        bn = max(lo, min(tile.block_n, _pow2_floor(n)))
        bk = max(lo, min(tile.block_k, _pow2_floor(kdim), GROUP if fmt in (INT4, FP8) else 1 << 30))
        return replace(tile, block_n=bn, block_k=bk)

    return replace(cfg, gate_up=fit(cfg.gate_up, i, h), down=fit(cfg.down, h, i))


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)
