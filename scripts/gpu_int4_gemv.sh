#!/usr/bin/env bash
# One device call for the int4 GEMV: GPU tests of the int4 linear paths, the tile sweep (winners to
# $OUT/tuned.json), the kernel table with those tiles (ours beside cuBLAS bf16 and torch's int4 kernel), then
# the 27B int4 decode bench with them. Logs and JSON go to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
timeout "${TEST_TIMEOUT:-150}" python -m pytest -q -s tests/gpu/test_linear_kernels.py -m gpu -p no:cacheprovider \
  -k "int4 or fast or graph" > "$OUT/test_linear.log" 2>&1
echo "== tests rc=$? $(tail -1 "$OUT/test_linear.log")"
timeout "${TUNE_TIMEOUT:-200}" python bench/linear_kernels.py --tune --formats int4 --ms 1 --tuned-out "$OUT/tuned.json" \
  > "$OUT/tune.log" 2>&1
echo "== tune rc=$?"; grep -E "best" "$OUT/tune.log" | tail -6
[ -s "$OUT/tuned.json" ] && export HINFER_TILES="$OUT/tuned.json"
timeout 150 python bench/linear_kernels.py --formats bf16,int4,int4-sym,int4-torch,fp8 --ms 1,8 --prefill-m 0 \
  --json "$OUT/linear.json" > "$OUT/linear.log" 2>&1
echo "== table rc=$?"; tail -14 "$OUT/linear.log"
timeout "${BENCH_TIMEOUT:-200}" python -m hinfer bench qwen3.6-27b --quant int4 --concurrency 1,8 --depths 1K --prefill "" \
  --out "$OUT" > "$OUT/bench_27b_int4.log" 2>&1
echo "== bench rc=$?"; tail -8 "$OUT/bench_27b_int4.log"
