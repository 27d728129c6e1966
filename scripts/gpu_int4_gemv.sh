#!/usr/bin/env bash
# One device call for the int4 GEMV: GPU tests of the linear kernels, the kernel table (ours beside cuBLAS bf16 and
# torch's int4 kernel), then the tile sweep. Logs and JSON go to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
timeout "${TEST_TIMEOUT:-150}" python -m pytest -q -s tests/gpu/test_linear_kernels.py -m gpu -p no:cacheprovider \
  -k "int4 or fast or graph" > "$OUT/test_linear.log" 2>&1
echo "== tests rc=$? $(tail -1 "$OUT/test_linear.log")"
timeout 200 python bench/linear_kernels.py --formats bf16,int4,int4-sym,int4-torch,fp8 --ms 1,8 --prefill-m 0 \
  --json "$OUT/linear.json" > "$OUT/linear.log" 2>&1
echo "== table rc=$?"; tail -22 "$OUT/linear.log"
timeout "${TUNE_TIMEOUT:-220}" python bench/linear_kernels.py --tune --formats int4 --ms 1 > "$OUT/tune.log" 2>&1
echo "== tune rc=$?"; grep -E "best|int4'" "$OUT/tune.log" | tail -14
