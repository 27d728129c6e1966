#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the fp8 routed experts on tensor cores
# (hinfer/ops/triton/moe_fp8_mma.py; HINFER_MOE_FP8=grouped for the grouped kernels). Its GPU test first (against
# the fp32 reference and the grouped kernels, T = 1, 3, 8, 32, per-row and 128 x 128 block scales; the grouped fp8
# tests beside it),
# then the MoE kernel table at fp8 both ways (T = 1, 8, 32: us per layer, share of the selected experts' bytes),
# the 35B-A3B at fp8 (one and eight lanes) grouped against the new kernel, then the new kernel's tiles swept at one and
# eight tokens (`bench/experts_mma_tiles.py --fmt fp8`) and the 35B-A3B on the winners (HINFER_TILES). Lands in
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
for arm in grouped mma; do
  HINFER_MOE_FP8=$arm BENCH_TIMEOUT=75 bench_as "fp8_35b_$arm" "$PWD" qwen3.6-35b-a3b --quant fp8 --concurrency 1,8 \
    --depths 1K --prefill ""
done
left 330 && timeout 150 python bench/experts_mma_tiles.py --fmt fp8 --model 35b --t 1 8 --splits 1,2,4 \
  --max-regs 0,128 --tuned-out "$R/tuned_fp8.json" > "$R/sweep_fp8.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep_fp8.txt"; pack
[ -s "$R/tuned_fp8.json" ] || exit 0
for arm in packaged tuned packaged tuned; do
  left 500 || break
  tiles=""; [ $arm = tuned ] && tiles="$R/tuned_fp8.json"
  HINFER_MOE_FP8=mma HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "fp8_35b_${arm}_$((SECONDS - START))" "$PWD" \
    qwen3.6-35b-a3b --quant fp8 --concurrency 1,8 --depths 1K --prefill ""
done
