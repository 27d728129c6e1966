#!/usr/bin/env bash
# One device call: x quantized ahead in its own launch for the int4 x int8 decode (act_int8.py; the int4_a8
# tile's x_ahead), where each program quantizing all rows of x itself lost (8 rows: gate_up, down). Its GPU tests,
# the kernels alone at 1, 4 and 8 rows beside the bf16 kernel and the prologue form, the sweep at 8 rows with both
# forms, then 27B int4 decode with the sweep's entries against the packaged ones, alternated.
# Lands in $OUT/gpu_a8_ahead.tgz.
set -uo pipefail
PACK=gpu_a8_ahead; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q tests/gpu/test_int4_a8.py tests/ops/test_act_int8.py -m "gpu or not gpu" \
  -p no:cacheprovider -x > "$R/tests.txt" 2>&1
echo "== tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -20
pack
left 200 && timeout 150 python bench/linear_kernels.py --formats int4-mma,int4-a8,int4-a8-ahead --ms 1,4,8 \
  --prefill-m 0 --json "$R/linear_a8_ahead.json" > "$R/linear.txt" 2>&1
echo "== table rc=$?"; grep -E "M=" "$R/linear.txt" | head -50
pack
left 330 && timeout 200 python bench/int4_mma_tiles.py --a8 --ms 8 --json "$R/a8_tiles_8.json" \
  --tuned-out "$R/a8_tuned_8.json" > "$R/a8_tiles_8.txt" 2>&1
echo "== sweep rc=$?"; grep -E "default" "$R/a8_tiles_8.txt" | sed -E 's/SkinnyConfig\(([^)]*)\)/[\1]/g' | cut -c1-220
pack
for i in 1 2; do
  left 500 && decode_bench "27b_packaged_$i" qwen3.6-27b
  [ -s "$R/a8_tuned_8.json" ] && left 530 && HINFER_TILES="$R/a8_tuned_8.json" decode_bench "27b_a8_8rows_$i" qwen3.6-27b
done
