#!/usr/bin/env bash
# One device call: the int4 x int8 decode at speculative verification's rows (one lane, K = 3: 4 rows of x; two
# lanes at K = 1: 4). The 27B's MTP rounds (K = 3, one and eight lanes) with the packaged entries, with int4_a8
# entries at 2 and 4 rows on the bf16 kernel's tiles (bench/tile_variants.py --a8-rows: how the one-row entries
# won in the graph), and with the tiles its sweep picks alone at 2 and 4 rows (bench/int4_mma_tiles.py --a8),
# alternated: only the decode graph decides. Lands in $OUT/gpu_a8_spec.tgz.
set -uo pipefail
PACK=gpu_a8_spec; source "$(dirname "$0")/device_common.sh"
python bench/tile_variants.py --config qwen3.6-27b --a8-rows 2,4 --out-dir "$R" > /dev/null
ROWS="$R/qwen3.6-27b-int4_a8-rows2-4.json"
spec() {  # NAME [env...]: the 27B's MTP rounds at K = 3, one and eight lanes
  local name=$1; shift
  env "$@" timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "decode C=|spec K=" "$R/$name.txt"
  pack
}
spec packaged_1 HINFER_INT4_DECODE=tuned
spec a8_rows_1 HINFER_TILES="$ROWS"
left 300 && timeout "${SWEEP_TIMEOUT:-150}" python bench/int4_mma_tiles.py --a8 --ms 4 --json "$R/a8_tiles_4.json" \
  --tuned-out "$R/a8_tuned_4.json" > "$R/a8_tiles_4.txt" 2>&1
echo "== sweep rc=$?"; grep -E "default" "$R/a8_tiles_4.txt" | sed -E 's/SkinnyConfig\(([^)]*)\)/[\1]/g' | cut -c1-220
pack
[ -s "$R/a8_tuned_4.json" ] && left 480 && spec a8_swept_1 HINFER_TILES="$R/a8_tuned_4.json"
left 480 && spec packaged_2 HINFER_INT4_DECODE=tuned
left 520 && spec a8_rows_2 HINFER_TILES="$ROWS"
