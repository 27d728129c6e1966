#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache; after scripts/gpu_experts_stripes.sh): the 122B-A10B's routed
# experts with their words stripe by stripe against rows, whose experts weigh more in a step than the 35B-A3B's:
# the eight-token sweep per word order, then decode at one and eight lanes with HINFER_EXPERTS_WORDS=rows against
# stripes (on their sweep's tiles), alternated. Lands in $OUT/gpu_experts_stripes_122b.tgz.
set -uo pipefail
PACK=gpu_experts_stripes_122b; source "$(dirname "$0")/device_common.sh"
sweep() {  # sweep LAYOUT
  timeout 110 python bench/experts_mma_tiles.py --model 122b --t 8 --rows 32,64,128 --warps 2,4,8 --splits 1 \
    --layout "$1" --tuned-out "$R/tiles_$1_122b.json" > "$R/experts_122b_$1.txt" 2>&1
  echo "== experts_122b_$1 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/experts_122b_$1.txt"; pack
}
sweep stripes
sweep rows
tiles="$R/tiles_stripes_122b.json"; [ -s "$tiles" ] || tiles=""
arm() {  # arm NAME WORDS [TILES]
  HINFER_EXPERTS_WORDS=$2 HINFER_TILES="${3:-}" BENCH_TIMEOUT=100 bench_as "$1" "$PWD" qwen3.5-122b-a10b --quant int4 \
    --concurrency 1,8 --depths 1K --prefill ""
}
left 300 && arm rows_a rows
left 380 && arm stripes_a stripes "$tiles"
left 460 && arm rows_b rows
left 520 && arm stripes_b stripes "$tiles"
