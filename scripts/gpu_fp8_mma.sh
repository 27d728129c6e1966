#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): fp8 weights on tensor cores from their row-major bytes
# (hinfer/ops/triton/linear_fp8_mma.py, built 2026-12-04 without a GPU: compiled for sm_90 without spills, its torch
# twin and index replays checked on the CPU). Its GPU tests first (every e4m3 code through the MMA: are bf16
# subnormal operands kept?), then the tile sweep against the current fp8 paths at the 27B shapes and 1-32 rows
# (per-row scales; an M bucket without an entry takes the next one above; the winners into $R/tiles-fp8.json,
# where HINFER_FP8_MMA=tuned takes them), then the 27B fp8 at one and eight lanes without the kernel, with the
# winners, and everywhere (2026-12-04 packaged: 100.9 / 617.1 tok/s, 65% / 55% of floor; the lines 138 / 1,000).
# Lands in $OUT/gpu_fp8_mma.tgz.
set -uo pipefail
PACK=gpu_fp8_mma; source "$(dirname "$0")/device_common.sh"
gpu_tests test_fp8_mma 120 tests/gpu/test_fp8_mma.py  # on: the sweep checks each tile before timing it
left 240 && { timeout 240 python bench/fp8_mma.py --ms 1,4,8,16,32 --json "$R/fp8_mma.json" \
  --tiles "$R/tiles-fp8.json" > "$R/fp8_mma.txt" 2>&1; echo "== sweep rc=$? $((SECONDS - START)) s"
  grep -E "M=|tuned" "$R/fp8_mma.txt" | head -40; pack; }
left 400 && BENCH_TIMEOUT=75 HINFER_FP8_MMA=0 bench_as fp8_before "$PWD" qwen3.6-27b --quant fp8 --concurrency 1,8 \
  --depths 1K --prefill ""
[ -s "$R/tiles-fp8.json" ] && left 470 && BENCH_TIMEOUT=75 HINFER_TILES="$R/tiles-fp8.json" bench_as fp8_mma "$PWD" \
  qwen3.6-27b --quant fp8 --concurrency 1,8 --depths 1K --prefill ""
left 520 && BENCH_TIMEOUT=60 HINFER_FP8_MMA=1 bench_as fp8_mma_all "$PWD" qwen3.6-27b --quant fp8 --concurrency 1,8 \
  --depths 1K --prefill ""
