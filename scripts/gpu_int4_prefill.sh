#!/usr/bin/env bash
# One device call (about six minutes): the int4 prefill GEMMs at M = 8192 beside bf16 cuBLAS and fp8 (bench/
# linear_kernels.py: dequant into bf16 + cuBLAS, w4a16, w4a8 on fp8 tensor cores; never measured at that size),
# then the 27B's 8K prefill end to end with each int4 mode (HINFER_INT4_PREFILL; decode stays on fragment order,
# w4a16 / w4a8 read a transient row-packed copy), then the int4 kernels' GPU test. The int4 prefill line
# (>= 15,000 tok/s at 8K) is out of bf16's reach (11,215 measured): only fp8 tensor cores can meet it.
# Lands in $OUT/gpu_int4_prefill.tgz.
set -uo pipefail
PACK=gpu_int4_prefill; source "$(dirname "$0")/device_common.sh"
timeout 150 python bench/linear_kernels.py --formats int4 --ms 1 --prefill-m 8192 --json "$R/linear_prefill.json" \
  > "$R/linear_prefill.txt" 2>&1
echo "== linear rc=$?"; grep -E "TFLOP/s" "$R/linear_prefill.txt" | head -40; pack
for mode in dequant w4a8 w4a16; do
  left 330 || break
  HINFER_INT4_PREFILL=$mode timeout 80 python -m hinfer bench qwen3.6-27b --quant int4 --concurrency 1 --depths 1K \
    --prefill 8K --out "$R" > "$R/prefill_$mode.txt" 2>&1
  echo "== prefill $mode rc=$?"; grep -E "prefill" "$R/prefill_$mode.txt" | tail -2; pack
done
left 360 && timeout 110 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_linear_kernels.py \
  tests/gpu/test_int4_mma.py -k "test_int4 and (prefill or not mma)" > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -8; pack
