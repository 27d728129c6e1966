#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the int4 x int8 kernel at verification's rows. An eight-lane
# MTP round at K = 3 verifies 32 rows a projection on the bf16 warpgroup / mma.sync kernels at ~40% of copy
# bandwidth (9.3 of its 16.2 ms, 2026-12-04 02:57 UTC); with x quantized ahead the int8 kernel now takes 9-64 rows
# in MMA column blocks of 8, 16 or 32 (built 2026-12-04 without a GPU, compiled for sm_90 at 114-202 registers
# without spills). Its GPU tests, the sweep against the packaged bf16 path at 16 and 32 rows on the 27B's
# projections (winners into $R/tiles-a8-rows.json), then the 27B's MTP rounds at one and eight lanes without and
# with them, alternated. Lands in $OUT/gpu_a8_rows.tgz.
set -uo pipefail
PACK=gpu_a8_rows; source "$(dirname "$0")/device_common.sh"
gpu_tests test_a8_rows 150 tests/gpu/test_int4_a8.py -k "many_rows" || exit 0
left 200 && { timeout 200 python bench/int4_mma_tiles.py --a8 --ms 16,32 --json "$R/a8_rows.json" \
  --tuned-out "$R/tiles-a8-rows.json" > "$R/a8_rows.txt" 2>&1; echo "== sweep rc=$? $((SECONDS - START)) s"
  grep -E "M=|int4_a8" "$R/a8_rows.txt" | head -30; pack; }
[ -s "$R/tiles-a8-rows.json" ] || exit 0
left 420 && mtp_rounds packaged_1 80
left 490 && mtp_rounds a8_rows_1 80 HINFER_TILES="$R/tiles-a8-rows.json"
