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
spec() {  # NAME [env...]: the 27B's MTP rounds at K = 3, one and eight lanes
  local name=$1; shift
  env "$@" timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; grep -E "decode C=|spec K=|round" "$R/$name.txt" | head -8
  pack
}
spec packaged_1 HINFER_INT4_DECODE=tuned
spec a8_rows_1 HINFER_TILES="$ROWS"
spec a8_ahead_1 HINFER_TILES="$AHEAD"
left 420 && spec packaged_2 HINFER_INT4_DECODE=tuned
left 450 && spec a8_rows_2 HINFER_TILES="$ROWS"
left 480 && spec a8_ahead_2 HINFER_TILES="$AHEAD"
left 500 && timeout 60 python bench/linear_kernels.py --formats int4-mma,int4-a8,int4-a8-ahead --ms 4 --prefill-m 0 \
  --json "$R/linear_a8_m4.json" > "$R/linear_m4.txt" 2>&1
grep -E "M=" "$R/linear_m4.txt" | head -30
pack
