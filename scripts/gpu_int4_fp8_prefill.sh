#!/usr/bin/env bash
# One device call (about five minutes): the int4 prefill modes on fp8 tensor cores against the default dequant +
# bf16 cuBLAS: w4a8 (exact int4 values, 1x128 scales on both operands: cuBLAS where the probe finds it computes
# them, else the Triton GEMM) and fp8 (the weight rounded per row, cuBLAS rowwise): their GPU tests, the int4
# prefill GEMMs at M = 8192 and the scratch writers alone (gathering / coalesced), the 27B's 8K prefill with each
# (fp8 with the coalesced scratch writer too). Lands in $OUT/gpu_int4_fp8_prefill.tgz.
set -uo pipefail
PACK=gpu_int4_fp8_prefill; source "$(dirname "$0")/device_common.sh"
timeout 100 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_int4_mma.py \
  tests/gpu/test_linear_kernels.py -k "prefills or (test_int4 and not mma and not wgmma)" > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -8; pack
left 200 && timeout 120 python bench/linear_kernels.py --formats int4 --ms 1 --prefill-m 8192 \
  --json "$R/linear_prefill.json" > "$R/linear_prefill.txt" 2>&1
echo "== linear rc=$?"; grep -E "1x128|bf16-cublas|-mma:|scaled_mm|scratch" "$R/linear_prefill.txt" | head -60; pack
for mode in w4a8 fp8 fp8:coalesced dequant; do
  left 330 || break
  HINFER_INT4_DEQUANT=$([ "${mode#*:}" = coalesced ] && echo coalesced || echo gather) \
  HINFER_INT4_PREFILL=${mode%%:*} timeout 80 python -m hinfer bench qwen3.6-27b --quant int4 --concurrency 1 --depths 1K \
    --prefill 8K --out "$R" > "$R/prefill_${mode/:/_}.txt" 2>&1
  echo "== prefill $mode rc=$?"; grep -E "prefill" "$R/prefill_${mode/:/_}.txt" | tail -1; pack
done
