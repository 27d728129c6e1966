"""The tile forms: one frozen dataclass of launch parameters per kind of kernel, and the form each kernel
family's table entries take (FORMS, by family name; docs/ARCHITECTURE.md, "Tile tables")."""

from __future__ import annotations

from dataclasses import dataclass

# Linear families: the skinny (decode) kernel per weight format, its W8A8 twins, the int4 tensor-core kernel
# (linear_int4_mma: num_stages is its loop depth), its warpgroup-MMA twin (linear_int4_wgmma: an entry is also where
# it takes over from the mma.sync kernel) and the prefill GEMMs (promote: a second accumulator live).
BF16, FP8_ROW, FP8_BLOCK, INT4 = "bf16", "fp8_row", "fp8_block", "int4"
FP8_ROW_A8, FP8_BLOCK_A8 = f"{FP8_ROW}-a8", f"{FP8_BLOCK}-a8"
INT4_MMA, INT4_WGMMA = "int4_mma", "int4_wgmma"
INT4_A8 = "int4_a8"  # the int4 x int8 decode (linear_int4_a8): int4_mma's form, entries only where it won
FP8_MMA = "fp8_mma"  # fp8 weights on tensor cores from the row-major bytes (linear_fp8_mma): int4_mma's form
GEMM, GEMM_PROMOTE = "gemm", "gemm_promote"
# MoE families: the routed experts per weight format; int4 experts at decode sizes on tensor cores
MOE_BF16, MOE_INT4, MOE_FP8 = "moe_bf16", "moe_int4", "moe_fp8"
MOE_INT4_MMA = "moe_int4_mma"
MOE_FP8_MMA = "moe_fp8_mma"  # fp8 experts on tensor cores (moe_fp8_mma): the dense fp8 kernel's form
# Attention: the split-KV decode / verify kernel and the flash-style prefill kernel. The decode kernel's tiles are
# keyed by the KV format too (their conversions change what the kernel is bound by): bf16 KV under the plain name
ATTENTION_DECODE, ATTENTION_PREFILL = "attention_decode", "attention_prefill"
DECODE_KV_FORMATS = ("bf16", "fp8", "int8", "k8v4", "int4")


def attention_decode_family(kv: str) -> str:
    """The decode family of a KV format (its --kv-dtype name)."""
    return ATTENTION_DECODE if kv == "bf16" else f"{ATTENTION_DECODE}-{kv}"


def attention_prefill_family(kv: str) -> str:
    """The prefill family of a KV format (its --kv-dtype name)."""
    return ATTENTION_PREFILL if kv == "bf16" else f"{ATTENTION_PREFILL}-{kv}"


GEMV = 1  # block_m of the CUDA-core GEMV paths (M == 1)


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
    ring: int = 0  # int4_mma: groups in a cp.async shared-memory ring (0: num_stages' register look-ahead);
    # int4_wgmma: x's groups per cp.async chunk, two chunks in shared memory (0: x through registers);
    # moe_int4_mma: the words' cp.async ring slots (0: num_stages' register look-ahead; the scales stay in registers)
    # int4_mma: take 128 + z off each weight register (one bf16x2 fma) instead of a second MMA against ones,
    # which costs as many MMAs as one stripe's and grows with the rows of x
    fma_offset: bool = False
    # int4_mma: each group's x loaded ahead of its MMA (with the register look-ahead's weights, or one group
    # ahead beside the ring) instead of just before it: more registers, so it wins at some shapes, loses at others
    x_ahead: bool = False
    # int4_mma, int4_wgmma, moe_int4_mma: registers per thread capped at this (ptxas maxnreg; 0: the compiler's count).
    # Registers go to warps in steps of 256, so a kernel a few over 96 at 4 warps fits 4 programs an SM, not 5
    max_regs: int = 0
    # int4_mma with a ring and x_ahead: two groups to a slot (`ring` slots of two), one barrier per two groups
    ring_pairs: bool = False
    # skinny fp8 GEMV (block_m 1): the weights read as 32-bit words of four codes and turned into fp32 by their bits
    # (shifts and masks on the integer pipe) instead of the conversion instructions
    words: bool = False
    # int4_mma, moe_int4_mma, moe_fp8_mma: a program's groups of x read once into shared memory after the PDL wait,
    # each group's x then read from there beside its MMA (no round trip to L2 a group, no registers held ahead);
    # the int4 kernels take it as HINFER_X_STAGED says, the fp8 experts as their entry says
    x_staged: bool = False
    # int4_wgmma with a ring of two or more groups: each group's MMA left in flight while the next group's weights
    # unpack (waited one group later; retired before its x buffer is refilled and before the loop goes round)
    # instead of waited at once
    async_mma: bool = False


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class Tile:
    """One MoE expert GEMM's tile."""

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


@dataclass(frozen=True)
class DecodeTile:
    block_n: int  # KV tokens per step
    num_warps: int
    num_stages: int
    ctas_per_sm: int  # programs kept resident per SM: sizes the split count
    # 1-byte KV formats (fp8, int8, int4 codes): dots in fp16, the codes turned to fp16 by bit tricks instead of
    # the quarter-rate int / fp8 -> bf16 conversions (attention_common._load_tile_f16); bf16 caches ignore it
    f16: bool = False
    # integer tiles (and the f16 form's fp8 values) read a 32-bit word at a time and turned two values an
    # instruction (attention_common.load_tile's WORDS): fewer instructions, one more pass of shared memory
    words: bool = False
    # int8 keys (int8, k8v4): the queries rounded to int8 per row, the scores on int8 tensor cores from the key
    # codes as stored (no key conversion; attention_common.quantize_rows_int8)
    q8: bool = False


@dataclass(frozen=True)
class PrefillTile:
    block_m: int  # query rows per program
    block_n: int  # KV tokens per step
    num_warps: int
    num_stages: int
    # the running max and the accumulator move only when a block's scores pass the max by more than 8 (base 2;
    # attention_common.softmax_step's LAZY): most key blocks then skip the rescale of the [BLOCK_M, D] accumulator
    lazy: bool = False
    # 1-byte KV formats: dots in fp16, the tiles converted as the decode tile's f16 form does (bf16 caches ignore it)
    f16: bool = False
    words: bool = False  # as the decode tile's
    q8: bool = False  # as the decode tile's (the scores on int8 warpgroup MMA)


FORMS: dict[str, type] = {
    **dict.fromkeys((BF16, FP8_ROW, FP8_BLOCK, INT4, FP8_ROW_A8, FP8_BLOCK_A8, INT4_MMA, INT4_WGMMA,
                     INT4_A8, FP8_MMA),
                    SkinnyConfig),
    GEMM: GemmConfig,
    GEMM_PROMOTE: GemmConfig,
    **dict.fromkeys((MOE_BF16, MOE_INT4, MOE_FP8), MoeConfig),
    MOE_INT4_MMA: SkinnyConfig,  # the dense int4 kernel's form: block_k 128, block_m 8, split_k 1
    MOE_FP8_MMA: SkinnyConfig,  # the dense fp8 kernel's form: block_k 128, block_m 8, num_stages its depth
    **dict.fromkeys(map(attention_decode_family, DECODE_KV_FORMATS), DecodeTile),
    **dict.fromkeys(map(attention_prefill_family, DECODE_KV_FORMATS), PrefillTile),
}

# Buckets between the powers of two, per family: where one M of a power-of-two bucket wants another tile than the
# rest. The int4 experts' 24 holds two tokens (18 pairs): their direct grid fits one wave of programs under a
# register cap that costs three tokens' 27 pairs, which stay in the 32 bucket (bench/RESULTS.md, 2026-12-07).
FINER: dict[str, tuple[int, ...]] = {MOE_INT4_MMA: (24,)}
