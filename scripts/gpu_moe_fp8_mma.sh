#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the fp8 routed experts on tensor cores
# (hinfer/ops/triton/moe_fp8_mma.py, opt-in with HINFER_MOE_FP8=mma). Its GPU test first (against the fp32 reference
# and the grouped kernels, T = 1, 3, 8, 32, per-row and 128 x 128 block scales; the grouped fp8 tests beside it),
# then the MoE kernel table at fp8 both ways (T = 1, 8, 32: us per layer, share of the selected experts' bytes),
# then the 35B-A3B at fp8, one and eight lanes, the grouped kernels against the new ones alternated. Lands in
# $OUT/gpu_moe_fp8_mma.tgz.
set -uo pipefail
PACK=gpu_moe_fp8_mma; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_fp8 180 tests/gpu/test_moe_kernels.py -k "fp8" || exit 0
for arm in grouped mma; do
  HINFER_MOE_FP8=$arm timeout 100 python bench/moe_kernels.py --model 35b 122b --t 1 8 32 --fmt fp8 \
    > "$R/table_$arm.txt" 2>&1
  echo "== table $arm rc=$? $((SECONDS - START)) s"; grep -E "fp8 decode" "$R/table_$arm.txt"; pack
done
for arm in grouped mma grouped mma; do
  left 480 || break
  HINFER_MOE_FP8=$arm BENCH_TIMEOUT=75 bench_as "fp8_35b_${arm}_$((SECONDS - START))" "$PWD" qwen3.6-35b-a3b \
    --quant fp8 --concurrency 1,8 --depths 1K --prefill ""
done
