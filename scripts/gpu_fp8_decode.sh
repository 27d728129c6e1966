#!/usr/bin/env bash
# One device call for fp8 at decode sizes: GPU fp8 linear tests with W8A8, the kernel table in both decode modes,
# then the 27B fp8 decode bench in both modes (same run). Logs and JSON go to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
timeout 150 python -m pytest -q tests/gpu/test_linear_kernels.py -m gpu -p no:cacheprovider \
  -k "fp8" > "$OUT/test_fp8.log" 2>&1; echo "== tests rc=$? $(tail -1 "$OUT/test_fp8.log")"
for mode in w8a16 w8a8; do
  HINFER_FP8_DECODE=$mode timeout 100 python bench/linear_kernels.py --formats fp8,fp8-block --ms 1,8,16 \
    --prefill-m 0 --json "$OUT/linear_fp8_$mode.json" > "$OUT/linear_fp8_$mode.log" 2>&1
  echo "== table $mode"; tail -13 "$OUT/linear_fp8_$mode.log"
done
for mode in w8a16 w8a8; do
  HINFER_FP8_DECODE=$mode timeout 150 python -m hinfer bench qwen3.6-27b --quant fp8 --concurrency 1,8 --depths 1K \
    --prefill "" --out "$OUT/$mode" > "$OUT/bench_27b_fp8_$mode.log" 2>&1
  echo "== bench $mode rc=$?"; tail -3 "$OUT/bench_27b_fp8_$mode.log"
done
