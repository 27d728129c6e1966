"""The tuned tile tables: (family, N, K, M bucket) -> the family's tile form (forms.py), measured on the H200.

The sweeps print entries in this form to paste here (bench/linear_kernels.py --tune, bench/int4_mma_tiles.py,
bench/moe_kernels.py --sweep) and write them as JSON for HINFER_TILES (table.py) to try without editing the
package. A shape missing here takes its family's heuristic (linear.py, moe.py, attention.py beside this file).
What N, K and M are per family: docs/ARCHITECTURE.md, "Tile tables". An entry of another form (MoeConfig,
DecodeTile, ...) imports it from forms.py with it.
"""

from __future__ import annotations

from hinfer.ops.triton.tiles.forms import (
    FP8_MMA,
    INT4_A8,
    INT4_MMA,
    INT4_WGMMA,
    MOE_FP8_MMA,
    MOE_INT4_MMA,
    DecodeTile,
    SkinnyConfig,
    attention_decode_family,
)

# Linear: the skinny kernel. Swept on the H200 (2026-11-30, `bench/linear_kernels.py --tune --formats bf16
# --ms 1,8`); GDN in_proj fused (16480 rows) reuses the 16384-row winner.
TUNED: dict[tuple[str, int, int, int], object] = {
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
    # fp8 (per channel) GEMV at one row, swept on an H100 2026-12-05 (`--tune --formats fp8 --ms 1`, the
    # conversion form and the words form side by side: bench/results/tiles/20261205-1238-fp8-m1.json): 8 warps
    # of 16-32 rows everywhere, the words form where it won (o_proj / GDN out_proj, down); the 27B fp8 at one
    # lane 81.5 -> 89.4 tok/s on that H100 against the heuristic's tiles (32 rows, 4 warps)
    ("fp8_row", 14336, 5120, 1): SkinnyConfig(16, 128, 1, 1, 8, 3),
    ("fp8_row", 16384, 5120, 1): SkinnyConfig(16, 128, 1, 1, 8, 3),
    ("fp8_row", 16480, 5120, 1): SkinnyConfig(16, 128, 1, 1, 8, 3),
    ("fp8_row", 34816, 5120, 1): SkinnyConfig(16, 256, 1, 1, 8, 3),
    ("fp8_row", 5120, 6144, 1): SkinnyConfig(32, 256, 1, 4, 8, 3, words=True),
    ("fp8_row", 5120, 17408, 1): SkinnyConfig(32, 256, 1, 4, 8, 3, words=True),
    # fp8 with 128x128 block scales (the official FP8 checkpoints' layout) at one row, swept on an H100 2026-12-05
    # (`--tune --formats fp8-block --ms 1`, both forms, the heuristic's tile among the candidates:
    # bench/results/tiles/20261205-1705-fp8-block-m1-h100.json): 2,078-2,521 GB/s; the words form on gate_up,
    # o_proj / GDN out_proj and down, the conversion form on qkv and GDN in_proj (fused rows reuse 16384's)
    ("fp8_block", 14336, 5120, 1): SkinnyConfig(32, 128, 1, 2, 4, 3),
    ("fp8_block", 16384, 5120, 1): SkinnyConfig(64, 128, 1, 2, 4, 3),
    ("fp8_block", 16480, 5120, 1): SkinnyConfig(64, 128, 1, 2, 4, 3),
    ("fp8_block", 34816, 5120, 1): SkinnyConfig(64, 128, 1, 1, 8, 3, words=True),
    ("fp8_block", 5120, 6144, 1): SkinnyConfig(64, 128, 1, 8, 8, 3, words=True),
    ("fp8_block", 5120, 17408, 1): SkinnyConfig(64, 128, 1, 8, 8, 3, words=True),
    # fp8 (per channel) and int4 at M = 8 (tensor cores), swept 2026-12-01
    # (`--tune --formats fp8,int4 --ms 8`)
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
    # (`bench/int4_mma_tiles.py --ms 1,4,8,16,32 --rings 0,4`, asymmetric weights; ring: shared-memory ring)
    # x ahead at 1 and 8 rows: 27B int4 decode +2% / +4% with it (H200, 2026-12-03); those tiles hold 96
    # registers (max_regs, the last field): five programs an SM, as before the ring's loop was unrolled
    (INT4_MMA, 14336, 5120, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, True, 96),
    (INT4_MMA, 14336, 5120, 4): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (INT4_MMA, 14336, 5120, 8): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, True, 96),
    (INT4_MMA, 14336, 5120, 16): SkinnyConfig(128, 128, 16, 4, 4, 2, 4),
    (INT4_MMA, 14336, 5120, 32): SkinnyConfig(256, 128, 16, 2, 4, 2, 4),
    (INT4_MMA, 16384, 5120, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, True, 96),
    (INT4_MMA, 16384, 5120, 4): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (INT4_MMA, 16384, 5120, 8): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, True, 96),
    (INT4_MMA, 16384, 5120, 16): SkinnyConfig(128, 128, 16, 4, 4, 2, 4),
    (INT4_MMA, 16384, 5120, 32): SkinnyConfig(128, 128, 16, 2, 4, 2, 4),
    (INT4_MMA, 34816, 5120, 1): SkinnyConfig(128, 128, 8, 2, 4, 2, 4, False, True, 96),
    (INT4_MMA, 34816, 5120, 4): SkinnyConfig(128, 128, 8, 2, 4, 2, 4),
    (INT4_MMA, 34816, 5120, 8): SkinnyConfig(128, 128, 8, 2, 4, 2, 4, False, True, 96),
    (INT4_MMA, 34816, 5120, 16): SkinnyConfig(128, 128, 16, 1, 4, 2, 4),
    (INT4_MMA, 34816, 5120, 32): SkinnyConfig(128, 128, 16, 1, 4, 2, 4),
    (INT4_MMA, 5120, 6144, 1): SkinnyConfig(128, 128, 8, 8, 4, 2, 4, False, True, 96),
    (INT4_MMA, 5120, 6144, 4): SkinnyConfig(128, 128, 8, 8, 8, 2),
    (INT4_MMA, 5120, 6144, 8): SkinnyConfig(128, 128, 8, 8, 8, 2, 0, False, True),
    (INT4_MMA, 5120, 6144, 16): SkinnyConfig(128, 128, 8, 8, 4, 2),
    (INT4_MMA, 5120, 6144, 32): SkinnyConfig(128, 128, 16, 4, 4, 2, 4),
    (INT4_MMA, 5120, 17408, 1): SkinnyConfig(128, 128, 8, 16, 4, 2, 4, False, True, 96),
    (INT4_MMA, 5120, 17408, 4): SkinnyConfig(128, 128, 8, 16, 4, 2, 4),
    (INT4_MMA, 5120, 17408, 8): SkinnyConfig(128, 128, 8, 16, 4, 2, 4, False, True, 96),
    (INT4_MMA, 5120, 17408, 16): SkinnyConfig(128, 128, 16, 8, 4, 2, 4),
    (INT4_MMA, 5120, 17408, 32): SkinnyConfig(128, 128, 16, 4, 4, 2, 4),
    # int4 x int8 decode (linear_int4_a8), where it beat the bf16 kernels in the decode graph (an entry is where it
    # takes over). The 27B: one row at every projection on the bf16 kernel's packaged tiles, eight rows at o_proj
    # on its swept tile (`bench/int4_mma_tiles.py --a8 --ms 1,8`: 14.8 -> 10.0 us alone; alone its one-row winners
    # lost to these in the graph): 157.2 -> 176.5 tok/s at one lane, 941.2 -> 974.8 at eight (H200 2026-12-03)
    (INT4_A8, 14336, 5120, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, False, 96),
    (INT4_A8, 16384, 5120, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 4, False, False, 96),
    (INT4_A8, 34816, 5120, 1): SkinnyConfig(128, 128, 8, 2, 4, 2, 4, False, False, 96),
    (INT4_A8, 5120, 6144, 1): SkinnyConfig(128, 128, 8, 8, 4, 2, 4, False, False, 96),
    (INT4_A8, 5120, 17408, 1): SkinnyConfig(128, 128, 8, 16, 4, 2, 4, False, False, 96),
    (INT4_A8, 5120, 6144, 8): SkinnyConfig(128, 128, 8, 8, 8, 2, 4),
    # gate_up at eight rows with x quantized ahead in its own launch (x_ahead, act_int8), on 8 warps: 35.5 -> 32.8 us
    # against the 4-warp tile that held it (33.5 -> 31.4 against the bf16 kernel, 2026-12-03); qkv at eight rows on
    # the int8 kernel, x quantized in the programs: 18.0 -> 16.9 us against the warpgroup kernel (`bench/
    # int4_mma_tiles.py --a8 --a8-all --ms 8`); with both, the 27B int4 at eight lanes 982.4 / 982.5 / 982.6 ->
    # 988.8 / 987.9 / 989.2 tok/s (three pairs, H200 2026-12-05)
    (INT4_A8, 34816, 5120, 8): SkinnyConfig(128, 128, 8, 2, 8, 2, 2, False, True),
    (INT4_A8, 14336, 5120, 8): SkinnyConfig(256, 128, 8, 4, 8, 2, 4),
    # two and four rows (speculative verification: one lane at K = 1 or 3) with x quantized ahead, on the bf16
    # kernel's tiles (`bench/tile_variants.py --a8-rows 2,4 --a8-ahead`): the 27B's MTP round at one lane, K = 3,
    # 9.46 -> 9.12 ms (means of 6 and 3 runs in three calls; the eight-lane round, 32 rows, unchanged); plain
    # decode at two lanes 279.3 -> 305.2 tok/s, at four 515.3 -> 553.9 (H200 2026-12-03). Alone at four rows:
    # qkv 17.8 -> 16.0 us, GDN in_proj 18.5 -> 16.4, gate_up 38.3 -> 29.4.
    (INT4_A8, 14336, 5120, 2): SkinnyConfig(128, 128, 8, 4, 8, 2, 0, False, True),
    (INT4_A8, 14336, 5120, 4): SkinnyConfig(128, 128, 8, 4, 8, 2, 0, False, True),
    (INT4_A8, 16384, 5120, 2): SkinnyConfig(128, 128, 8, 4, 8, 2, 0, False, True),
    (INT4_A8, 16384, 5120, 4): SkinnyConfig(128, 128, 8, 4, 8, 2, 0, False, True),
    (INT4_A8, 34816, 5120, 2): SkinnyConfig(128, 128, 8, 2, 4, 2, 4, False, True),
    (INT4_A8, 34816, 5120, 4): SkinnyConfig(128, 128, 8, 2, 4, 2, 4, False, True),
    (INT4_A8, 5120, 6144, 2): SkinnyConfig(128, 128, 8, 8, 8, 2, 0, False, True),
    (INT4_A8, 5120, 6144, 4): SkinnyConfig(128, 128, 8, 8, 8, 2, 0, False, True),
    (INT4_A8, 5120, 17408, 2): SkinnyConfig(128, 128, 8, 16, 4, 2, 4, False, True),
    (INT4_A8, 5120, 17408, 4): SkinnyConfig(128, 128, 8, 16, 4, 2, 4, False, True),
    # sixteen rows (four lanes verifying K = 3 drafts) with x quantized ahead, MMA column blocks of 8 or 16 rows
    # (`bench/int4_mma_tiles.py --a8 --ms 16,32`, H200 2026-12-05): qkv 24.1 -> 19.7 us, GDN in_proj 26.6 -> 20.9,
    # down 36.6 -> 26.4 against the packaged bf16 path; gate_up and o_proj kept it, and at 32 rows nothing won
    (INT4_A8, 14336, 5120, 16): SkinnyConfig(128, 128, 16, 4, 4, 2, 2, False, True),
    (INT4_A8, 16384, 5120, 16): SkinnyConfig(128, 128, 8, 4, 4, 2, 2, False, True),
    (INT4_A8, 5120, 17408, 16): SkinnyConfig(128, 128, 16, 8, 4, 2, 2, False, True),
    # the 122B-A10B's dense projections at one row on the bf16 kernel's tiles (rings of 2 slots): one lane 264.6 ->
    # 272.4 tok/s (H200 2026-12-03, HINFER_INT4_DECODE=a8; at eight lanes a8 lost 1%, the 35B-A3B gained nothing)
    (INT4_A8, 17408, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 2),  # qkv
    (INT4_A8, 20480, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 2, 2),  # GDN in_proj
    (INT4_A8, 3072, 8192, 1): SkinnyConfig(128, 128, 8, 16, 4, 4, 2),  # o_proj, GDN out_proj
    (INT4_A8, 2048, 3072, 1): SkinnyConfig(128, 128, 8, 4, 4, 4, 2),  # shared expert gate_up
    (INT4_A8, 3072, 1024, 1): SkinnyConfig(128, 128, 8, 2, 4, 4, 2),  # shared expert down
    # int4 on warpgroup MMA, where it beat the mma.sync kernel by > 3% (an entry is where it takes over), swept
    # 2026-12-02 (`bench/int4_wgmma.py --ms 4,8,16,32 --tiles`, asymmetric weights)
    (INT4_WGMMA, 14336, 5120, 1): SkinnyConfig(256, 128, 8, 4, 8, 1),  # `--ms 1,2`: 1.27x / 1.05x
    (INT4_WGMMA, 14336, 5120, 2): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 14336, 5120, 4): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 14336, 5120, 8): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 14336, 5120, 16): SkinnyConfig(256, 128, 16, 2, 8, 1),
    (INT4_WGMMA, 14336, 5120, 32): SkinnyConfig(128, 128, 32, 2, 8, 1),
    (INT4_WGMMA, 16384, 5120, 1): SkinnyConfig(256, 128, 8, 4, 8, 1),  # `--ms 1,2`: 1.24x / 1.04x
    (INT4_WGMMA, 16384, 5120, 2): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 16384, 5120, 4): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 16384, 5120, 8): SkinnyConfig(256, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 16384, 5120, 32): SkinnyConfig(128, 128, 32, 2, 8, 1),
    (INT4_WGMMA, 34816, 5120, 16): SkinnyConfig(64, 128, 16, 1, 4, 1),
    # gate_up at 32 rows with x copied a group at a time (ring 1: 96 registers, five programs an SM): 67.9 -> 56.9
    # us, an eight-lane MTP round 16.00 -> 15.12 ms (H200 2026-12-04, `--ms 32 --rings 0,1,2,4`); the other shapes
    # kept x in registers
    (INT4_WGMMA, 34816, 5120, 32): SkinnyConfig(64, 128, 32, 1, 4, 1, 1),
    (INT4_WGMMA, 5120, 6144, 8): SkinnyConfig(128, 128, 8, 4, 8, 1),
    (INT4_WGMMA, 5120, 6144, 16): SkinnyConfig(128, 128, 16, 4, 8, 1),
    (INT4_WGMMA, 5120, 6144, 32): SkinnyConfig(128, 128, 32, 4, 8, 1),
    (INT4_WGMMA, 5120, 17408, 32): SkinnyConfig(128, 128, 32, 4, 8, 1),
    # ... and at the 35B-A3B and 122B-A10B dense shapes (`--config NAME`): from 16 rows the mma.sync kernel's
    # untuned tiles took 2-9x as long
    (INT4_WGMMA, 17408, 3072, 16): SkinnyConfig(64, 128, 16, 1, 4, 1),
    (INT4_WGMMA, 17408, 3072, 32): SkinnyConfig(128, 128, 32, 1, 8, 1),
    (INT4_WGMMA, 20480, 3072, 16): SkinnyConfig(64, 128, 16, 1, 4, 1),
    (INT4_WGMMA, 20480, 3072, 32): SkinnyConfig(128, 128, 32, 1, 8, 1),
    (INT4_WGMMA, 3072, 8192, 16): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 3072, 8192, 32): SkinnyConfig(128, 128, 32, 4, 8, 1),
    (INT4_WGMMA, 2048, 3072, 4): SkinnyConfig(64, 128, 8, 4, 4, 1),
    (INT4_WGMMA, 2048, 3072, 8): SkinnyConfig(64, 128, 8, 4, 4, 1),
    (INT4_WGMMA, 2048, 3072, 16): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 2048, 3072, 32): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 3072, 1024, 4): SkinnyConfig(64, 128, 8, 2, 4, 1),
    (INT4_WGMMA, 3072, 1024, 8): SkinnyConfig(64, 128, 8, 2, 4, 1),
    (INT4_WGMMA, 3072, 1024, 16): SkinnyConfig(64, 128, 16, 2, 4, 1),
    (INT4_WGMMA, 3072, 1024, 32): SkinnyConfig(64, 128, 16, 2, 4, 1),
    (INT4_WGMMA, 9216, 2048, 16): SkinnyConfig(128, 128, 16, 2, 8, 1),
    (INT4_WGMMA, 9216, 2048, 32): SkinnyConfig(64, 128, 16, 1, 4, 1),
    (INT4_WGMMA, 12288, 2048, 16): SkinnyConfig(128, 128, 16, 2, 8, 1),
    (INT4_WGMMA, 12288, 2048, 32): SkinnyConfig(128, 128, 32, 1, 8, 1),
    (INT4_WGMMA, 2048, 4096, 16): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 2048, 4096, 32): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 1024, 2048, 4): SkinnyConfig(64, 128, 8, 4, 4, 1),
    (INT4_WGMMA, 1024, 2048, 8): SkinnyConfig(64, 128, 8, 4, 4, 1),
    (INT4_WGMMA, 1024, 2048, 16): SkinnyConfig(64, 128, 8, 4, 4, 1),
    (INT4_WGMMA, 1024, 2048, 32): SkinnyConfig(64, 128, 16, 4, 4, 1),
    (INT4_WGMMA, 2048, 512, 16): SkinnyConfig(64, 128, 16, 1, 4, 1),
    (INT4_WGMMA, 2048, 512, 32): SkinnyConfig(64, 128, 16, 1, 4, 1),
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
    # the int4 lm_head (--lm-head int4), swept 2026-12-03 (`--config MODEL --shapes lm_head --ms 1,8 --splits 1,2`),
    # one tile won on all three: 35B-A3B 95.1 -> 79.4 us at one row, 99.6 -> 87.1 at 8; 27B 218.0 -> 183.2,
    # 238.3 -> 203.8; 122B-A10B 134.6 -> 114.2, 145.9 -> 124.7
    (INT4_MMA, 248320, 2048, 1): SkinnyConfig(256, 128, 8, 1, 4, 4),
    (INT4_MMA, 248320, 2048, 8): SkinnyConfig(256, 128, 8, 1, 4, 4),
    (INT4_MMA, 248320, 5120, 1): SkinnyConfig(256, 128, 8, 1, 4, 4),
    (INT4_MMA, 248320, 5120, 8): SkinnyConfig(256, 128, 8, 1, 4, 4),
    (INT4_MMA, 248320, 3072, 1): SkinnyConfig(256, 128, 8, 1, 4, 4),
    (INT4_MMA, 248320, 3072, 8): SkinnyConfig(256, 128, 8, 1, 4, 4),
    # fp8 weights on tensor cores from their row-major bytes (linear_fp8_mma), where they beat the current fp8 path
    # by > 2% (an entry is where the kernel takes over), swept on the H200 2026-12-05 (`bench/fp8_mma.py --ms
    # 1,4,8,16,32 --tiles`, per-row scales; bench/results/20261205-0333-fp8-mma-sweep.json). The winning 128-column,
    # 8-row, 4-warp tiles spill 8 bytes on sm_90, so the next fastest without spills stand in: gate_up at 4 rows 68.8
    # us (the spilling winner 63.7, the current path 104.3), down at 4 / 8 rows 34.9 / 36.4 (33.4 / 36.0; 49.3 /
    # 40.9). gate_up at 8 rows and down at one row are left out: no spill-free tile beat the current path by 2%
    (FP8_MMA, 14336, 5120, 4): SkinnyConfig(128, 128, 8, 4, 8, 2),
    (FP8_MMA, 14336, 5120, 8): SkinnyConfig(64, 128, 8, 4, 4, 2),
    (FP8_MMA, 14336, 5120, 16): SkinnyConfig(64, 128, 8, 2, 4, 2),
    (FP8_MMA, 16384, 5120, 4): SkinnyConfig(64, 128, 8, 4, 4, 2),
    (FP8_MMA, 16384, 5120, 8): SkinnyConfig(64, 128, 8, 4, 4, 2),
    (FP8_MMA, 16384, 5120, 16): SkinnyConfig(64, 128, 8, 2, 4, 2),
    (FP8_MMA, 34816, 5120, 4): SkinnyConfig(64, 128, 8, 1, 4, 4),
    (FP8_MMA, 34816, 5120, 16): SkinnyConfig(128, 128, 16, 1, 4, 2),
    (FP8_MMA, 5120, 6144, 4): SkinnyConfig(64, 128, 8, 8, 4, 2),
    (FP8_MMA, 5120, 6144, 8): SkinnyConfig(128, 128, 8, 8, 8, 2),
    (FP8_MMA, 5120, 6144, 16): SkinnyConfig(64, 128, 16, 8, 4, 2),
    (FP8_MMA, 5120, 6144, 32): SkinnyConfig(64, 128, 16, 4, 4, 2),
    (FP8_MMA, 5120, 17408, 4): SkinnyConfig(64, 128, 8, 8, 4, 2),
    (FP8_MMA, 5120, 17408, 8): SkinnyConfig(64, 128, 8, 8, 4, 2),
    (FP8_MMA, 5120, 17408, 16): SkinnyConfig(128, 128, 16, 8, 4, 2),
    # int4 experts on tensor cores (M = token x expert pairs: 9 at one token with the shared expert folded, 72 at 8
    # in bucket 128; until swept there, buckets 64, 256 and 512 borrow the 8-token winners, below),
    # swept 2026-12-02 (`bench/experts_mma_tiles.py --t 1 8`): 35B-A3B 13.9 -> 12.7 us (gate_up) and
    # 11.1 -> 9.5 (down) per layer at one token, 41.2 -> 31.8 and 35.6 -> 24.2 at 8; 122B-A10B 23.9 -> 20.3,
    # 19.9 -> 16.4, 95.6 -> 78.0, 94.4 -> 55.3
    # 35B-A3B at one token re-swept with K splits 2026-12-02 (`--t 1 --splits 1,2,4`): gate_up 10.6 -> 9.3 us
    # (K in 4 splits), down 9.0 -> 7.9
    # re-swept 2026-12-02 with the gate_up writing silu(gate) * up (the down reads it as is): gate_up 11.46 -> 9.80
    # us, down 6.16 -> 5.30 (35B-A3B); 122B-A10B down 10.51 -> 9.73, its gate_up within 0.5% (kept)
    # at one token held to 128 registers (max_regs) in the decode graph 2026-12-03 (`scripts/gpu_tile_variants.sh`:
    # the cap on every bucket: one lane 469.8 -> 489.7 tok/s on the 35B-A3B, 264.4 -> 271.3 on the 122B-A10B;
    # eight lanes lost 29% / 6%, so their buckets stay uncapped)
    # re-swept 2026-12-06 with x staged (`--t 1 --splits 1,2,4,8`, H100): gate_up 11.23 -> 8.88 us alone on 64
    # columns; in the decode graph only under the cap: one lane 477.7 -> 487.5 tok/s (uncapped 479.3)
    # held to 96 registers 2026-12-07 (H100): its 576 programs of 4 warps fit 4 an SM under 128 (528 at once, 48 in
    # a second wave), 5 under 96 (32 bytes of stack); one lane 503.1 / 503.9 -> 512.2 / 511.1 tok/s
    # The 35B-A3B's buckets re-swept 2026-12-07 on the words stripe by stripe (the default since, `--layout stripes
    # --t 1 2 4 8 --splits 1,2,4`, H100; bench/results/tiles/20261207-1649-moe-stripes-35b-h100.json): gate_up at one
    # / four / eight tokens 8.30 / 18.27 / 29.79 us, down 4.57 / 10.89 / 16.48 (rows: 34.21 / 19.34 at eight); in the
    # decode graph one / two / four / eight lanes 509.4 / 806.3 / 1,263.4 / 1,799.1 tok/s (rows, these buckets'
    # tiles before) -> 522.1 / 848.9 / 1,323.3 / 1,908.8 (two alternated rounds)
    (MOE_INT4_MMA, 1024, 2048, 16): SkinnyConfig(64, 128, 8, 4, 4, 4),
    (MOE_INT4_MMA, 2048, 512, 16): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    # two and three tokens (18 and 27 pairs: two and three lanes of plain decode), swept 2026-12-06 (`--t 3 --splits
    # 1,2 --max-regs 128`, H100): gate_up 20.23 -> 15.66 us, down 11.30 -> 9.53 alone (the four-token tiles before);
    # in the decode graph two lanes 722.6 -> 770.2 tok/s, three 972.7 -> 1,049.0 (two alternated rounds each)
    (MOE_INT4_MMA, 1024, 2048, 32): SkinnyConfig(64, 128, 8, 1, 4, 2, max_regs=128),
    (MOE_INT4_MMA, 2048, 512, 32): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    # two tokens alone (the finer bucket 24, forms.FINER): the down's 1,152 programs of 2 warps fit 8 an SM at its
    # 120-125 registers (1,056 at once, 96 in a second wave), 10 under 96 (one wave); decode 2026-12-07 (H100, the
    # 32 bucket capped, two alternated rounds): two lanes 795.7 / 796.5 -> 808.4 / 810.0 tok/s, three lanes (two
    # waves either way) 1,087.4 / 1,088.1 -> 1,074.7 / 1,075.0, so only two tokens take the cap
    (MOE_INT4_MMA, 2048, 512, 24): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=96),
    # four tokens (36 pairs: a one-lane MTP verification at K = 3, four lanes of plain decode), swept 2026-12-06
    # (`--t 4 --splits 1,2 --max-regs 0,128`, x as the decode reads it, H100): gate_up 24.18 -> 22.18 us, down 13.74 ->
    # 11.82 alone (the eight-token tiles before); in the decode graph four lanes 1,247 -> 1,257 tok/s, the one-lane
    # round 4.18 -> 4.15 ms (two alternated rounds each)
    (MOE_INT4_MMA, 1024, 2048, 64): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    (MOE_INT4_MMA, 2048, 512, 64): SkinnyConfig(64, 128, 8, 1, 4, 2),  # stripes (above)
    # 35B-A3B gate_up at 8 tokens re-swept 2026-12-03 (`--t 8 32 --splits 1,2`): 33.3 -> 32.6 us alone, decode
    # at 8 lanes 1,857.1 -> 1,879.8 tok/s with it (its down's winner was the packaged tile)
    # re-swept 2026-12-04 with the words loaded 16 bytes a thread (`--t 8 32 --splits 1,2 --rings 0,4`): 34.9 ->
    # 31.5 us alone; decode at 8 lanes 1,907.6 -> 1,950.6 tok/s in the same call (the ring lost; the down's winner
    # was within 0.1% of its packaged tile)
    (MOE_INT4_MMA, 1024, 2048, 128): SkinnyConfig(128, 128, 8, 1, 2, 2),  # stripes (above)
    (MOE_INT4_MMA, 2048, 512, 128): SkinnyConfig(64, 128, 8, 1, 2, 2),
    # 122B-A10B at one token re-swept with K splits 2026-12-02: gate_up 21.0 -> 18.7 us (2 splits), down 19.1 -> 14.1
    # re-swept 2026-12-06 with x staged (H100): gate_up 21.91 -> 16.80 us alone on 64 columns; one-lane decode
    # 259.9 -> 266.2 tok/s with the cap (uncapped 260.4); under 96 registers 2026-12-07 (one wave of its 576
    # programs, as the 35B-A3B's): 274.4 / 274.4 -> 280.8 / 280.6 (H100)
    (MOE_INT4_MMA, 2048, 3072, 16): SkinnyConfig(64, 128, 8, 2, 4, 4, max_regs=96),
    (MOE_INT4_MMA, 3072, 1024, 16): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    # two and three tokens, swept 2026-12-06 (`--t 3 --splits 1,2 --max-regs 128`, H100): gate_up 59.58 -> 40.46 us,
    # down 23.03 -> 21.37 alone; two lanes of decode 374.4 -> 389.8 tok/s, three 456.7 -> 501.3 (two alternated rounds)
    (MOE_INT4_MMA, 2048, 3072, 32): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    (MOE_INT4_MMA, 3072, 1024, 32): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    # two tokens alone: the gate_up's 1,152 programs in one wave under 96 registers, as the 35B-A3B's down; decode
    # 2026-12-07 (H100, the 32 bucket capped, two alternated rounds): two lanes 401.1 / 400.9 -> 427.6 / 427.8
    # tok/s, three lanes 512.4 / 512.5 -> 500.8 / 501.0
    (MOE_INT4_MMA, 2048, 3072, 24): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=96),
    # four tokens, swept 2026-12-06 (`--t 4 --splits 1,2 --max-regs 128`, H100): gate_up 58.22 -> 53.96 us, down
    # 37.14 -> 26.81 alone; four lanes of decode 565.9 / 564.1 -> 590.7 / 591.4 tok/s (two alternated rounds)
    (MOE_INT4_MMA, 2048, 3072, 64): SkinnyConfig(32, 128, 8, 1, 2, 4, max_regs=128),
    (MOE_INT4_MMA, 3072, 1024, 64): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    # eight tokens re-swept 2026-12-06 (`--t 8 --splits 1,2 --max-regs 0,128`, H100): gate_up 93.52 -> 89.77 us, down
    # 58.12 -> 45.34 on two warps (one before) alone; eight lanes of decode 729.4 / 730.9 -> 773.7 / 774.3 tok/s
    # re-swept 2026-12-07 on the words stripe by stripe (`--layout stripes --t 8`, H100; bench/results/tiles/
    # 20261207-1655-moe-stripes-122b-h100.json): gate_up 90.94 -> 77.98 us, down 45.27 -> 40.64 alone (rows on
    # their tiles); one / eight lanes of decode 279.8 / 779.5 -> 287.3 / 841.6 tok/s (two alternated rounds)
    (MOE_INT4_MMA, 2048, 3072, 128): SkinnyConfig(32, 128, 8, 1, 2, 2),
    (MOE_INT4_MMA, 3072, 1024, 128): SkinnyConfig(32, 128, 8, 1, 2, 2),
    # fp8 experts on tensor cores (moe_fp8_mma.py), the 35B-A3B swept 2026-12-06 (`bench/experts_mma_tiles.py --fmt fp8
    # --t 1 --splits 1,2,4 --max-regs 0,128`, then `--t 8 --splits 1,2`, H100): one token gate_up 14.12 -> 12.43 us,
    # down 10.51 -> 6.15 alone, one-lane decode 363.1 / 363.4 -> 393.8 / 394.0 tok/s (alternated); eight tokens gate_up
    # 58.74 -> 52.30, down 30.32 -> 26.56, eight lanes 1,229.1 -> 1,296.3 (the heuristic's tiles before). One token
    # re-swept with x staged (`--t 1 --x staged`): gate_up 12.22 -> 11.80, down 6.11 -> 6.05 alone; one-lane decode
    # 389.7 / 389.3 -> 393.6 / 394.2 tok/s, with the gate_up routing its token (`route_fp8`) 401.7 / 401.2
    (MOE_FP8_MMA, 1024, 2048, 16): SkinnyConfig(32, 128, 8, 1, 2, 4, x_staged=True),
    (MOE_FP8_MMA, 2048, 512, 16): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128, x_staged=True),
    # three tokens (27 pairs: two and three lanes), swept 2026-12-06 (`--t 3 --splits 1,2 --max-regs 0,128`, H100):
    # gate_up 28.19 -> 22.65 us, down 15.04 -> 13.40 alone; two lanes 529.9 -> 561.1 / 560.4 tok/s, three 720.9 ->
    # 767.7 / 768.7 (alternated)
    (MOE_FP8_MMA, 1024, 2048, 32): SkinnyConfig(128, 128, 8, 1, 8, 2, max_regs=128),
    (MOE_FP8_MMA, 2048, 512, 32): SkinnyConfig(64, 128, 8, 1, 4, 2),
    # four tokens (36 pairs: four lanes, a one-lane MTP verification at K = 3) and a verification of eight lanes x 4
    # tokens (288 pairs), swept 2026-12-06 (`--t 4 32 --splits 1 --max-regs 0,128`, H100): four tokens gate_up 38.64
    # -> 31.49 us, down 18.57 -> 16.53; 32 tokens gate_up 150.85 -> 131.64, down 77.15 -> 67.63 alone. Four lanes of
    # decode 861.0 / 860.4 -> 882.1 / 882.7 tok/s, the MTP round at K = 3 one lane 5.76 / 5.76 -> 5.64 / 5.65 ms, eight
    # lanes 15.83 / 15.81 -> 14.91 / 14.88 (alternated)
    (MOE_FP8_MMA, 1024, 2048, 64): SkinnyConfig(32, 128, 8, 1, 1, 2),
    (MOE_FP8_MMA, 2048, 512, 64): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    (MOE_FP8_MMA, 1024, 2048, 512): SkinnyConfig(128, 128, 8, 1, 4, 2, max_regs=128),
    (MOE_FP8_MMA, 2048, 512, 512): SkinnyConfig(64, 128, 8, 1, 2, 2),
    (MOE_FP8_MMA, 1024, 2048, 128): SkinnyConfig(64, 128, 8, 1, 2, 2),
    (MOE_FP8_MMA, 2048, 512, 128): SkinnyConfig(64, 128, 8, 1, 2, 2),
    # a verification of 8 lanes x 4 tokens (288 pairs), swept 2026-12-02 (`--t 32`): the 8-token winners held
    # within 1% everywhere but the 35B-A3B gate_up (83.5 -> 82.4 us at depth 2)
    # the 35B-A3B re-swept 2026-12-06 (`--t 32 --splits 1 --max-regs 0,128`, H100): gate_up 95.46 -> 81.14 us, down
    # 45.04 -> 40.09 alone; the eight-lane MTP round at K = 3 11.08 / 10.98 -> 10.40 / 10.47 ms (the 122B-A10B's
    # winners wait for a GPU its eight-lane verification fits: bench/results/tiles/moe-t32/)
    (MOE_INT4_MMA, 1024, 2048, 512): SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128),
    (MOE_INT4_MMA, 2048, 512, 512): SkinnyConfig(128, 128, 8, 1, 4, 2, max_regs=128),
    (MOE_INT4_MMA, 2048, 3072, 512): SkinnyConfig(32, 128, 8, 1, 2, 4),
    (MOE_INT4_MMA, 3072, 1024, 512): SkinnyConfig(64, 128, 8, 1, 1, 2),
}
# The decode attention kernel per KV format and query heads a KV head (head_dim 256), swept 2026-12-04 with the
# split count filling whole waves (`bench/attention_kernels.py --only decode --sweep decode --kv-dtype FMT [--f16]
# [--heads H,HKV]`: one lane x 128K, eight x 128K and 32K, 64 x 1K; eight lanes x 4 tokens at 32K). The 27B (6
# query heads a KV head), one token a lane against the default tile: bf16 142 / 952 us at one / eight lanes x 128K
# (was 153 / 962), k8v4 173 / 1,208 (186 / 1,305). Four tokens a lane (bf16 takes the heuristic's 2 programs an SM:
# 343 -> 260 us): k8v4 462 -> 372. The 1-byte formats' f16 form (dots in fp16, codes turned by their bits): fp8
# 140 / 861 / 292 -> 102 / 622 / 224 us (one lane x 128K / eight x 128K / eight x 4 tokens), 27B int4 decode at one
# / eight lanes x 128K 135.9 / 369.9 -> 146.0 / 441.6 tok/s; int4 171 / 1,176 / 399 -> 156 / 1,087 / 394, 125.0 /
# 299.0 -> 127.8 / 315.4 tok/s; int8 178 / 964 / 334 -> 142 / 952 / 319 us; k8v4 lost with it (kept off).
# The MoE models (35B-A3B: 8 query heads a KV head, 122B-A10B: 16), bf16 and fp8 KV. bf16, one lane x 128K: 123 /
# 148 -> 89 / 90 us; eight x 4 tokens at 32K (16 a KV head): 208 -> 171. fp8 with its f16 form, one / eight lanes x
# 128K and eight x 4 tokens: 8 a KV head 109 / 443 / 185 -> 67 / 321 / 123 us, 16: 81 / 453 / 290 -> 69 / 334 /
# 212; int4 decode at one / eight lanes x 128K, 35B-A3B 372.1 / 954.7 -> 403.5 / 1,124.8 tok/s, 122B-A10B 231.0 /
# 538.4 -> 244.5 / 596.0. Tiles read by 32-bit words (DecodeTile.words), A/B in one process: k8v4 171 / 1,187 / 374
# -> 148 / 1,019 / 347 us; in the f16 form they lose (fp8 103 / 624 / 220 -> 113 / 737 / 351, int4 162 / 1,136 /
# 393 -> 191 / 1,364 / 602, int8 190 / 959 / 323 -> 267 / 953 / 425: their tile reaches the dot through one more
# pass of shared memory, 30 KB more of it). int8 keys scored on int8 tensor cores from int8-rounded queries
# (DecodeTile.q8): int8 173 / 959 / 323 -> 165 / 882 / 252 us, 27B int4 decode at one / eight lanes x 128K 133.3 /
# 345.2 -> 135.0 / 365.6 tok/s; k8v4 1,019 -> 953 and 346 -> 339 us at eight lanes, 131.0 / 332.3 -> 133.1 / 347.4
# tok/s (its one-lane kernel alone read 182 -> 244 us in that run, against a 1.6% gain end to end).
# Keys (KV format, query heads a KV head, q_len bucket).
_DECODE = {
    ("bf16", 6, 1): DecodeTile(64, 4, 4, 2),
    ("fp8", 6, 1): DecodeTile(64, 4, 5, 2, f16=True),
    ("int8", 6, 1): DecodeTile(64, 4, 5, 2, f16=True, q8=True),
    ("k8v4", 6, 1): DecodeTile(64, 4, 5, 2, words=True, q8=True),
    ("int4", 6, 1): DecodeTile(64, 4, 5, 2, f16=True),
    ("fp8", 6, 4): DecodeTile(64, 4, 5, 2, f16=True),
    ("int8", 6, 2): DecodeTile(32, 4, 5, 3, q8=True),
    ("k8v4", 6, 2): DecodeTile(32, 4, 5, 3, q8=True),
    ("int8", 6, 4): DecodeTile(64, 4, 5, 4, f16=True, q8=True),
    ("k8v4", 6, 4): DecodeTile(64, 4, 4, 2, words=True, q8=True),
    ("int4", 6, 4): DecodeTile(64, 4, 5, 2, f16=True),
    ("bf16", 8, 1): DecodeTile(64, 4, 3, 2),
    ("bf16", 8, 4): DecodeTile(32, 4, 5, 2),
    ("bf16", 16, 1): DecodeTile(64, 4, 3, 2),
    ("bf16", 16, 4): DecodeTile(64, 8, 5, 2),
    ("fp8", 8, 1): DecodeTile(64, 4, 5, 2, f16=True),
    ("fp8", 8, 4): DecodeTile(64, 4, 5, 2, f16=True),
    ("fp8", 16, 1): DecodeTile(64, 4, 5, 2, f16=True),
    ("fp8", 16, 4): DecodeTile(64, 8, 5, 2, f16=True),
}
TUNED.update({(attention_decode_family(kv), g, 256, m): tile for (kv, g, m), tile in _DECODE.items()})
# The int4 experts' 8-token winners also serve 33-64 and 129-256 pairs (buckets not swept).
for (_fam, _n, _k, _m), _tile in list(TUNED.items()):
    if _fam == MOE_INT4_MMA and _m == 128:
        for _b in (64, 256):
            TUNED.setdefault((_fam, _n, _k, _b), _tile)
# The other MoE families (moe_bf16 / int4 / fp8), the prefill GEMMs (gemm*) and attention prefill: no per-shape
# entries yet, their heuristics cover every shape.
