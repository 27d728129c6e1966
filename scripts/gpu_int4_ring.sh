#!/usr/bin/env bash
# One device call for the int4 kernel's shared-memory ring: its GPU tests, a tile sweep of ring sizes beside the
# tuned register look-ahead tiles at M = 1 and 8 (27B shapes), then the 27B int4 decode with the winners.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
timeout 150 python -m pytest -q tests/gpu/test_int4_mma.py tests/gpu/test_norm_attention_kernels.py -m gpu \
  -k "ring or quantized" -p no:cacheprovider > "$OUT/test_ring.log" 2>&1
echo "== tests rc=$? $(tail -1 "$OUT/test_ring.log")"; grep -E "^(FAILED|E )" "$OUT/test_ring.log" | head -20
timeout "${TUNE_TIMEOUT:-240}" python bench/int4_mma_tiles.py --ms ${MS:-1,8} --rings ${RINGS:-4,6} \
  --json "$OUT/int4_ring_tiles.json" --tuned-out "$OUT/int4_ring_tuned.json" > "$OUT/tiles.log" 2>&1
echo "== tiles rc=$?"; grep -v "^ " "$OUT/tiles.log" | tail -12
HINFER_TILES="$OUT/int4_ring_tuned.json" timeout 150 python -m hinfer bench qwen3.6-27b --quant int4 \
  --concurrency 1,8 --depths 1K --prefill "" --out "$OUT" > "$OUT/bench_27b_int4.log" 2>&1
echo "== bench rc=$?"; tail -6 "$OUT/bench_27b_int4.log"
