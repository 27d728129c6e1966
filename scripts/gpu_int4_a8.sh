#!/usr/bin/env bash
# One device call for the int4 x int8 decode kernel (hinfer/ops/triton/linear_int4_a8.py): its GPU tests, its
# tile sweep at the 27B shapes against the bf16 kernel's packaged tiles (bench/int4_mma_tiles.py --a8: entries
# only where it won), then 27B int4 decode with those entries (HINFER_INT4_DECODE=tuned) against bf16.
# Lands in $OUT/gpu_int4_a8.tgz.
set -uo pipefail
PACK=gpu_int4_a8; source "$(dirname "$0")/device_common.sh"
timeout "${TEST_TIMEOUT:-150}" python -m pytest -q tests/gpu/test_int4_a8.py -m gpu -p no:cacheprovider -x \
  > "$R/test_int4_a8.txt" 2>&1
echo "== tests rc=$? $(tail -1 "$R/test_int4_a8.txt")"; grep -E "^(FAILED|E )" "$R/test_int4_a8.txt" | head -20
pack
left 200 && timeout "${SWEEP_TIMEOUT:-330}" python bench/int4_mma_tiles.py --a8 --ms "${MS:-1,8}" \
  --json "$R/a8_tiles.json" --tuned-out "$R/a8_tuned.json" > "$R/a8_tiles.txt" 2>&1
echo "== sweep rc=$?"; grep -E "default|^  \(" "$R/a8_tiles.txt" | tail -24
pack
left 500 && HINFER_INT4_DECODE=bf16 decode_bench 27b_bf16 qwen3.6-27b
[ -s "$R/a8_tuned.json" ] && left 530 && HINFER_TILES="$R/a8_tuned.json" decode_bench 27b_a8_tuned qwen3.6-27b
left 560 && HINFER_INT4_DECODE=bf16 decode_bench 27b_bf16_2 qwen3.6-27b
