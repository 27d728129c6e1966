#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache), after scripts/gpu_ring_x.sh: the int4 experts' ring with x in
# it (ring_x) at the other decode buckets: the 35B-A3B's four-token tiles and the 122B-A10B's eight-token tiles
# alone, ring and ring_x side by side with the packaged tile first (`bench/experts_mma_tiles.py --splits 1
# --rings 4,6,8 --ring-x --rows 32,64,128 --warps 2,4`), then each sweep's winners in the decode graph against the
# packaged tiles, alternated, while time is left (35B-A3B at four lanes, 122B-A10B at eight: `hinfer bench MODEL
# --quant int4 --concurrency C --depths 1K --prefill ""`). Lands in $OUT/gpu_ring_x_more.tgz.
set -uo pipefail
PACK=gpu_ring_x_more; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
sweep() {  # sweep NAME MODEL T SECONDS
  left $((400 - $4)) || return 1
  timeout "$4" python bench/experts_mma_tiles.py --model "$2" --t "$3" --splits 1 --rings 4,6,8 --ring-x \
    --rows 32,64,128 --warps 2,4 --json "$R/sweep_$1.json" --tuned-out "$R/tuned_$1.json" > "$R/sweep_$1.txt" 2>&1
  echo "== sweep $1 rc=$? $((SECONDS - START)) s"; grep -E "default|^      " "$R/sweep_$1.txt" | head -12; pack
}
sweep 35b_t4 35b 4 150
sweep 122b_t8 122b 8 200
arm() {  # arm NAME TILES C MODEL
  HINFER_TILES="$2" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$4" --quant int4 --concurrency "$3" --depths 1K --prefill ""
}
for round in a b; do
  for spec in 35b_t4:4:qwen3.6-35b-a3b 122b_t8:8:qwen3.5-122b-a10b; do
    IFS=: read -r name c model <<< "$spec"
    [ -f "$R/tuned_$name.json" ] || continue
    left 470 && arm "${name}_packaged_$round" "" "$c" "$model"
    left 530 && arm "${name}_rx_$round" "$R/tuned_$name.json" "$c" "$model"
  done
done
