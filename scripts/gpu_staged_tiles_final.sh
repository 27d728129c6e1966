#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the one-token experts
# gate_up tiles now packaged (64 columns of 4 warps under the 128-register cap, x staged): the int4 experts' GPU
# tests, the 35B-A3B's line at one and eight lanes alternated with its dense one-row projections under the same cap
# (HINFER_TILES; the packaged dense tiles won the staged sweep alone, uncapped), then the 122B-A10B's line. Lands in
# $OUT/gpu_staged_tiles_final.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_final; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
python bench/tile_variants.py --config qwen3.6-35b-a3b --variants max_regs=128 --max-m 1 --families int4_mma \
  --out-dir "$R/tiles" > /dev/null
CAP=$R/tiles/qwen3.6-35b-a3b-int4_mma-maxregs128-m1.json
tiles_arm 35b_line_a "" qwen3.6-35b-a3b --concurrency 1,8
tiles_arm 35b_dense_cap_a "$CAP" qwen3.6-35b-a3b --concurrency 1,8
gpu_tests test_experts 120 tests/gpu/test_moe_kernels.py -k "int4"
left 220 && tiles_arm 35b_line_b "" qwen3.6-35b-a3b --concurrency 1,8
left 240 && tiles_arm 35b_dense_cap_b "$CAP" qwen3.6-35b-a3b --concurrency 1,8
left 260 && tiles_arm 122b_line "" qwen3.5-122b-a10b --concurrency 1,8
