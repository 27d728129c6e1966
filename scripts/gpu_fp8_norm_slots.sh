#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): the fp8 experts' rows summed by the next add + norm launch
# (`norm_slots_fp8`, off until measured) instead of by the fp8 down launch (its last program to finish an N tile
# sums the tile's slots), as the int4 experts' are by default since 2026-12-06 20:07 (35B-A3B one lane +2.5% on an
# H100). The GPU test first, then `hinfer bench qwen3.6-35b-a3b --quant fp8 --spec mtp --spec-k 3 --concurrency 1,4,8
# --depths 1K --prefill "" --steps 64` with HINFER_FUSION_ROWS=norm_slots_fp8=64 against the default, alternated.
# Lands in $OUT/gpu_fp8_norm_slots.tgz.
set -uo pipefail
PACK=gpu_fp8_norm_slots; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_fp8_rows 90 tests/gpu/test_moe_kernels.py -k "fp8_leave_their_rows" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant fp8 --spec mtp \
  --spec-k 3 --concurrency 1,4,8 --depths 1K --prefill "" --steps 64; }
for round in a b; do
  left 200 && arm "down_sums_$round" ""
  left 240 && arm "norm_sums_$round" "norm_slots_fp8=64"
done
