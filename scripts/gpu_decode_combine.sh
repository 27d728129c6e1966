#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): split decode attention merging its splits in its last
# program (`decode_combine` launch fusion, off by default until measured) instead of the combine launch. At one
# lane the combine took 35 us of a 35B-A3B int4 step of 1.94 ms on the H200 (10 launches, 2026-12-05 profile),
# the decode kernel 44. Its GPU test first (bit for bit to the two launches but for the row sums' order, gated,
# three KV formats, a CUDA graph replayed at other lengths), then `hinfer bench MODEL --quant int4 --concurrency
# 1,8 --depths 1K --prefill ""` with HINFER_FUSION_ROWS=decode_combine=64 against the default, alternated, on the
# 35B-A3B and the 27B, and the 27B at eight lanes x 32K (fewer splits, more rows a merge). Lands in
# $OUT/gpu_decode_combine.tgz.
set -uo pipefail
PACK=gpu_decode_combine; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_combine 150 tests/gpu/test_norm_attention_kernels.py -k "last_split_merges or decode_gated" || exit 0
arm() {  # arm NAME ROWS MODEL [ARGS...]
  local name=$1 rows=$2 model=$3; shift 3
  HINFER_FUSION_ROWS="$rows" BENCH_TIMEOUT=70 bench_as "$name" "$PWD" "$model" --quant int4 --prefill "" "$@"
}
for round in a b; do
  left 330 && arm "35b_apart_$round" "" qwen3.6-35b-a3b --concurrency 1,8 --depths 1K
  left 370 && arm "35b_merged_$round" "decode_combine=64" qwen3.6-35b-a3b --concurrency 1,8 --depths 1K
  left 410 && arm "27b_apart_$round" "" qwen3.6-27b --concurrency 1,8 --depths 1K,32K
  left 450 && arm "27b_merged_$round" "decode_combine=64" qwen3.6-27b --concurrency 1,8 --depths 1K,32K
done
