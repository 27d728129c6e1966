#!/usr/bin/env bash
# One device call: the int4 x int8 decode at speculative verification's rows (one lane, K = 3: 4 rows of x; two
# lanes at K = 1: 4). The 27B's MTP rounds (K = 3, one and eight lanes) with the packaged entries, with int4_a8
# entries at 2 and 4 rows on the bf16 kernel's tiles (bench/tile_variants.py --a8-rows: how the one-row entries
# won in the graph), x rounded in each program or ahead in its own launch (--a8-ahead), alternated twice: only the
# decode graph decides; then the kernels alone at 4 rows. Lands in $OUT/gpu_a8_spec.tgz.
set -uo pipefail
PACK=gpu_a8_spec; source "$(dirname "$0")/device_common.sh"
python bench/tile_variants.py --config qwen3.6-27b --a8-rows 2,4 --out-dir "$R" > /dev/null
python bench/tile_variants.py --config qwen3.6-27b --a8-rows 2,4 --a8-ahead --out-dir "$R" > /dev/null
ROWS="$R/qwen3.6-27b-int4_a8-rows2-4.json" AHEAD="$R/qwen3.6-27b-int4_a8-rows2-4-ahead.json"
mtp_rounds packaged_1 100 HINFER_INT4_DECODE=tuned
mtp_rounds a8_rows_1 100 HINFER_TILES="$ROWS"
mtp_rounds a8_ahead_1 100 HINFER_TILES="$AHEAD"
left 420 && mtp_rounds packaged_2 100 HINFER_INT4_DECODE=tuned
left 450 && mtp_rounds a8_rows_2 100 HINFER_TILES="$ROWS"
left 480 && mtp_rounds a8_ahead_2 100 HINFER_TILES="$AHEAD"
left 500 && timeout 60 python bench/linear_kernels.py --formats int4-mma,int4-a8,int4-a8-ahead --ms 4 --prefill-m 0 \
  --json "$R/linear_a8_m4.json" > "$R/linear_m4.txt" 2>&1
grep -E "M=" "$R/linear_m4.txt" | head -30
pack
