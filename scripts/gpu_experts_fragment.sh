#!/usr/bin/env bash
# One device call (BUDGET seconds, default 300; carry .kcache): the 35B-A3B's routed experts at eight tokens with
# their words stripe-major (mma fragment order per expert, or the row words stripe by stripe, which the prefill's
# grouped kernels could address word by word) against the row layout, over the same tile grid (the dense int4
# kernel streams the same bytes 1.56x faster on fragment order than on rows, bench/RESULTS.md 2026-12-07 11:43; the
# experts on fragment order were timed only at the rows' packaged tiles, 2026-12-04 02:53); then Nsight Compute on
# the experts beside the dense kernel (scripts/gpu_ncu_experts_proxy.sh) with what is left; the kernels' GPU test
# last. Lands in $OUT/gpu_experts_fragment.tgz.
set -uo pipefail
PACK=gpu_experts_fragment; source "$(dirname "$0")/device_common.sh"
B=${BUDGET:-300}
sweep() {  # sweep LAYOUT TOKENS
  timeout 75 python bench/experts_mma_tiles.py --model 35b --t "$2" --rows 32,64,128 --warps 2,4,8 --splits 1 \
    --layout "$1" --tuned-out "$R/tiles_$1_t$2.json" > "$R/experts_t$2_$1.txt" 2>&1
  echo "== experts_t$2_$1 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/experts_t$2_$1.txt"; pack
}
sweep fragment 8
sweep stripes 8
sweep rows 8
left $((B - 150)) && BUDGET=$((B - 30 - SECONDS + START)) bash scripts/gpu_ncu_experts_proxy.sh 2>&1 | grep -v "^$"
cp "$OUT"/gpu_ncu_experts_proxy.tgz "$R"/ 2>/dev/null; pack
left $((B - 60)) && gpu_tests fragment_test $((B - 10 - SECONDS + START)) tests/gpu/test_moe_kernels.py -k stripe_major
