"""Attention kernel families and their heuristics (sweeps: bench/attention_kernels.py --sweep decode|prefill).
Key: N = query heads per KV head (G), K = head_dim, M = the largest q_len of the sequences in the launch; the
decode and prefill families are one per KV format (forms.attention_decode_family, attention_prefill_family).
"""

from __future__ import annotations

import functools

from hinfer.ops.triton.tiles.forms import (
    DECODE_KV_FORMATS,
    DecodeTile,
    PrefillTile,
    attention_decode_family,
    attention_prefill_family,
)
from hinfer.ops.triton.tiles.table import Family, lookup


def decode_rows(q_max: int, group: int) -> int:
    """The decode kernel's padded rows per KV head (M_PAD): G query heads x q_max tokens, >= 16 for tl.dot."""
    return max(16, 1 << (group * q_max - 1).bit_length())


def _decode_heuristic(m: int, n: int, k: int) -> DecodeTile:
    """The K/V loads wait on a page-table load, so Triton's pipeliner keeps num_stages - 3 tile buffers:
    stages 5 gives two 32-token K+V buffers (75 KB shared, ~150 registers at D=256: 3 programs per SM, sm_90
    ptxas); ctas_per_sm is the programs an SM holds at once, the wave the split count fills
    (attention_decode.decode_splits)."""
    if decode_rows(m, n) * k >= 64 * 256:  # verify with many rows: wgmma, 8 warps, 131 KB shared
        return DecodeTile(block_n=32, num_warps=8, num_stages=5, ctas_per_sm=1)
    if decode_rows(m, n) > 16:  # 32 rows: 2 programs an SM fill the wave (swept at 4 tokens x 6 heads, every format)
        return DecodeTile(block_n=32, num_warps=4, num_stages=5, ctas_per_sm=2)
    return DecodeTile(block_n=32, num_warps=4, num_stages=5, ctas_per_sm=3)


def _prefill_heuristic(m: int, n: int, k: int, kv: str = "bf16") -> PrefillTile:
    """D=256: a 128x256 fp32 accumulator over 8 warps is 128 registers a thread; BLOCK_N=32 with 3 stages is
    the largest tile sm_90 ptxas builds without spills (244 registers, 131 KB shared; BLOCK_N=64 spills).
    fp8 caches take the f16 form (dots in fp16; H200, the 27B's heads, kernel alone 8-12% faster from 2K to 128K
    keys, the 128K prompt 4,822 -> 5,088 tok/s); int4's f16 form lost 5-10% (its codes' conversion on the
    critical path), int8's and k8v4's spill. The lazy rescale lost 10-13% on every format; words moved fp8
    and int4 by under 1.5% either way (bench/RESULTS.md, 2026-12-04 18:2x UTC). int8 and k8v4 caches score on
    int8 warpgroup MMA from int8-rounded queries (the q8 form): 8-14% faster from 2K to 128K keys (20:3x UTC)."""
    f16, q8 = kv == "fp8", kv in ("int8", "k8v4")
    if k >= 256:
        return PrefillTile(block_m=128, block_n=32, num_warps=8, num_stages=3, f16=f16, q8=q8)
    return PrefillTile(block_m=128, block_n=64, num_warps=8, num_stages=3, f16=f16, q8=q8)


DECODE: dict[str, Family[DecodeTile]] = {
    kv: Family(attention_decode_family(kv), _decode_heuristic) for kv in DECODE_KV_FORMATS
}
PREFILL: dict[str, Family[PrefillTile]] = {
    kv: Family(attention_prefill_family(kv), functools.partial(_prefill_heuristic, kv=kv), max_m=1 << 16)
    for kv in DECODE_KV_FORMATS
}


def decode_config(q_max: int, group: int, head_dim: int, kv: str = "bf16") -> DecodeTile:
    """kv: the KV format's --kv-dtype name (formats without tiles of their own, fp16 / fp32, take bf16's)."""
    return lookup(DECODE.get(kv, DECODE["bf16"]), q_max, group, head_dim)


def prefill_config(q_max: int, group: int, head_dim: int, kv: str = "bf16") -> PrefillTile:
    """kv: the KV format's --kv-dtype name (formats without tiles of their own, fp16 / fp32, take bf16's)."""
    return lookup(PREFILL.get(kv, PREFILL["bf16"]), q_max, group, head_dim)
