#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache; an H100 serves; after scripts/gpu_experts_stripes.sh, if the
# stripes won there): the 35B-A3B's experts tiles retuned on stripes at the decode buckets (one, two, four and
# eight tokens: rows, warps and K splits), then decode at one to eight lanes, HINFER_EXPERTS_WORDS=stripes on those
# tiles against rows on the packaged ones, alternated; the winners are the tuned entries to package for stripes.
# Lands in $OUT/gpu_experts_stripes_tiles.tgz.
set -uo pipefail
PACK=gpu_experts_stripes_tiles; source "$(dirname "$0")/device_common.sh"
timeout 330 python bench/experts_mma_tiles.py --model 35b --t 1 2 4 8 --rows 32,64,128 --warps 2,4,8 \
  --splits 1,2,4 --layout stripes --tuned-out "$R/tiles_stripes_35b.json" > "$R/sweep_stripes_35b.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep_stripes_35b.txt"; pack
tiles="$R/tiles_stripes_35b.json"; [ -s "$tiles" ] || tiles=""
arm() {  # arm NAME WORDS [TILES]
  HINFER_EXPERTS_WORDS=$2 HINFER_TILES="${3:-}" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 \
    --concurrency 1,2,4,8 --depths 1K --prefill ""
}
left 400 && arm rows_a rows
left 450 && arm stripes_a stripes "$tiles"
left 500 && arm rows_b rows
left 540 && arm stripes_b stripes "$tiles"
