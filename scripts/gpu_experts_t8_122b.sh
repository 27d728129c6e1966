#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the 122B-A10B's eight-token experts tiles (its down on one
# warp, swept before x was read as the decode reads it and before the 16-byte words) swept again, with and without
# the 128-register cap, and the winners against the packaged tiles at eight lanes in the decode graph, two
# alternated rounds. Lands in $OUT/gpu_experts_t8_122b.tgz.
set -uo pipefail
PACK=gpu_experts_t8_122b; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 260 python bench/experts_mma_tiles.py --model 122b --t 8 --splits 1,2 --max-regs 0,128 \
  --json "$R/sweep_122b_t8.json" --tuned-out "$R/tuned_122b_t8.json" > "$R/sweep_122b_t8.txt" 2>&1
echo "== sweep 122b t8 rc=$? $((SECONDS - START)) s"; grep -E "^122b " "$R/sweep_122b_t8.txt"; pack
[ -f "$R/tuned_122b_t8.json" ] || exit 0
for round in a b; do
  left 470 && tiles_arm "packaged_$round" "" qwen3.5-122b-a10b --concurrency 8
  left 520 && tiles_arm "t8_$round" "$R/tuned_122b_t8.json" qwen3.5-122b-a10b --concurrency 8
done
