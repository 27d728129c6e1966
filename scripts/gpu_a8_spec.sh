#!/usr/bin/env bash
# One device call: the int4 x int8 decode at speculative verification's rows (one lane, K = 3: 4 rows of x; two
# lanes: 8). Sweeps its tiles at 2 and 4 rows (bench/int4_mma_tiles.py --a8: entries only where it beat the bf16
# kernel alone), then the 27B's MTP rounds (K = 3) with those entries (HINFER_TILES) against the packaged ones,
# alternated: alone-winners have lost in the decode graph before, so only the graph decides.
# Lands in $OUT/gpu_a8_spec.tgz.
set -uo pipefail
PACK=gpu_a8_spec; source "$(dirname "$0")/device_common.sh"
timeout "${SWEEP_TIMEOUT:-240}" python bench/int4_mma_tiles.py --a8 --ms 2,4 --json "$R/a8_tiles_2_4.json" \
  --tuned-out "$R/a8_tuned_2_4.json" > "$R/a8_tiles_2_4.txt" 2>&1
echo "== sweep rc=$?"; grep -E "default" "$R/a8_tiles_2_4.txt" | sed -E 's/SkinnyConfig\(([^)]*)\)/[\1]/g' | cut -c1-220
pack
spec() {  # NAME [env...]: the 27B's MTP rounds at K = 3, one and eight lanes
  local name=$1; shift
  env "$@" timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "decode C=|spec K=" "$R/$name.txt"
  pack
}
for i in 1 2; do
  left 480 && spec "packaged_$i" HINFER_INT4_DECODE=tuned
  [ -s "$R/a8_tuned_2_4.json" ] && left 480 && spec "a8_2_4_$i" HINFER_TILES="$R/a8_tuned_2_4.json"
done
