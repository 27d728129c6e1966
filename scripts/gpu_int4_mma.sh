#!/usr/bin/env bash
# One device call for the Gluon int4 tensor-core kernel (the CUDA int4 decode path): its GPU tests, the kernel
# table beside the current int4 kernels, and the tile sweep. Logs and JSON go to $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
timeout "${TEST_TIMEOUT:-420}" python -m pytest -q tests/gpu/test_int4_mma.py -m gpu -p no:cacheprovider \
  > "$OUT/test_int4_mma.log" 2>&1
echo "== tests rc=$? $(tail -1 "$OUT/test_int4_mma.log")"; grep -E "^(FAILED|E )" "$OUT/test_int4_mma.log" | head -20
timeout 200 python bench/linear_kernels.py --formats int4,int4-sym,int4-mma,int4-mma-sym --ms 1,8,16 --prefill-m 0 \
  --json "$OUT/linear_int4_mma.json" > "$OUT/linear.log" 2>&1
echo "== table rc=$?"; tail -18 "$OUT/linear.log"
timeout "${TUNE_TIMEOUT:-400}" python bench/int4_mma_tiles.py --ms 1,8,16 --json "$OUT/int4_mma_tiles.json" \
  > "$OUT/tiles.log" 2>&1
echo "== tiles rc=$?"; tail -15 "$OUT/tiles.log"
