#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache with .kcache/tiles/dense35_cap.json): the one-token experts
# gate_up tiles now packaged (64 columns of 4 warps under the 128-register cap, x staged): the int4 experts' GPU
# tests, the 35B-A3B's line at one and eight lanes alternated with its dense one-row projections under the same cap
# (HINFER_TILES; the packaged dense tiles won the staged sweep alone, uncapped), then the 122B-A10B's line. Lands in
# $OUT/gpu_staged_tiles_final.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_final; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
T=$PWD/.kcache/tiles
arm() {  # arm NAME TILES MODEL ARGS...
  local name=$1 tiles=$2; shift 2
  HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "$name" "$PWD" "$@" --quant int4 --depths 1K --prefill ""
}
arm 35b_line_a "" qwen3.6-35b-a3b --concurrency 1,8
arm 35b_dense_cap_a "$T/dense35_cap.json" qwen3.6-35b-a3b --concurrency 1,8
gpu_tests test_experts 120 tests/gpu/test_moe_kernels.py -k "int4"
left 220 && arm 35b_line_b "" qwen3.6-35b-a3b --concurrency 1,8
left 240 && arm 35b_dense_cap_b "$T/dense35_cap.json" qwen3.6-35b-a3b --concurrency 1,8
left 260 && arm 122b_line "" qwen3.5-122b-a10b --concurrency 1,8
