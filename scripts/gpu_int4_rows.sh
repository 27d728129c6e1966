#!/usr/bin/env bash
# One device call for the int4 kernel at 16 and 32 rows of x (speculative verification, 8 lanes x 4 tokens):
# GPU tests of rows in blocks along the grid and the fma_offset tile field, a tile sweep at M = 8, 16 and 32 with
# half-height row blocks and the per-weight offset variant,
# then the 27B int4 decode and MTP rounds (K = 3, 1 and 8 lanes, forced acceptance 0.8) with the winners.
set -uo pipefail
# logs under $OUT/r, packed into $OUT/gpu_int4_rows.tgz at exit (the device returns a few files only)
TOP="${OUT:-/tmp/hinfer-out}"; OUT="$TOP/r"; mkdir -p "$OUT"
trap 'tar czf "$TOP/gpu_int4_rows.tgz" -C "$OUT" .' EXIT
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
timeout 150 python -m pytest -q tests/gpu/test_int4_mma.py -m gpu -k "rows_of_x or fma_offset or twin or graph" \
  -p no:cacheprovider > "$OUT/test_rows.txt" 2>&1
echo "== tests rc=$? $(tail -1 "$OUT/test_rows.txt")"; grep -E "^(FAILED|E )" "$OUT/test_rows.txt" | head -20
timeout "${TUNE_TIMEOUT:-240}" python bench/int4_mma_tiles.py --ms ${MS:-8,16,32} --rings 0,4 --fma-offset \
  --json "$OUT/int4_rows_tiles.json" --tuned-out "$OUT/int4_rows_tuned.json" > "$OUT/tiles.txt" 2>&1
echo "== tiles rc=$?"; grep -v "^ " "$OUT/tiles.txt" | tail -12
[ -s "$OUT/int4_rows_tuned.json" ] && export HINFER_TILES="$OUT/int4_rows_tuned.json"
timeout "${BENCH_TIMEOUT:-240}" python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 \
  --concurrency 1,8 --depths 1K --prefill "" --steps 64 --forced-acceptance 0.8 --out "$OUT" \
  > "$OUT/bench_27b_int4_spec.txt" 2>&1
echo "== bench rc=$?"; grep -E "decode C=|spec K=|forced|Error" "$OUT/bench_27b_int4_spec.txt" | tail -12
