#!/usr/bin/env bash
# One device call (about five minutes): HINFER_INT4_PREFILL=fp8 (an e4m3 scratch per row from fragment order, cuBLAS
# fp8 rowwise) against the default dequant + bf16 cuBLAS: its GPU tests, the int4 prefill GEMMs at M = 8192 (the
# decode layout's scratch writers beside the row layout's modes), the 27B's 8K prefill with each; then the int4
# lm_head's tiles on the 27B and 122B-A10B (the 35B-A3B's are packaged). Lands in $OUT/gpu_int4_fp8_prefill.tgz.
set -uo pipefail
PACK=gpu_int4_fp8_prefill; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_int4_mma.py \
  tests/gpu/test_linear_kernels.py -k "fp8 or prefills or test_int4" > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -8; pack
left 200 && timeout 120 python bench/linear_kernels.py --formats int4 --ms 1 --prefill-m 8192 \
  --json "$R/linear_prefill.json" > "$R/linear_prefill.txt" 2>&1
echo "== linear rc=$?"; grep -E "bf16-cublas|dequant|:fp8|scaled_mm" "$R/linear_prefill.txt" | head -40; pack
for mode in fp8 dequant; do
  left 300 || break
  HINFER_INT4_PREFILL=$mode timeout 80 python -m hinfer bench qwen3.6-27b --quant int4 --concurrency 1 --depths 1K \
    --prefill 8K --out "$R" > "$R/prefill_$mode.txt" 2>&1
  echo "== prefill $mode rc=$?"; grep -E "prefill" "$R/prefill_$mode.txt" | tail -1; pack
done
for m in "27b qwen3.6-27b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 330 && timeout 70 python bench/int4_mma_tiles.py --config "$2" --shapes lm_head --ms 1,8 --splits 1,2 \
    --tuned-out "$R/tuned_lm_head_$1.json" > "$R/sweep_lm_head_$1.txt" 2>&1
  echo "== sweep $1 rc=$?"; grep -E " M=.*default" "$R/sweep_lm_head_$1.txt"; pack
done
