#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): first the 122B-A10B's four-token experts test on its
# packaged 64-pair tiles; then the experts' 32-pair bucket (two and three lanes: 18 and 27 pairs), never swept with x
# as the decode reads it: both models at three tokens under the 128-register cap (the four-token winners' cap), and
# the winners against the packaged tiles in the decode graph at two and three lanes, alternated. Lands in
# $OUT/gpu_experts_t3.tgz.
set -uo pipefail
PACK=gpu_experts_t3; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_t4 90 -rf tests/gpu/test_moe_kernels.py -k "int4 and real_shapes and 122b and -4]"
for m in 35b 122b; do
  timeout 120 python bench/experts_mma_tiles.py --model $m --t 3 --splits 1,2 --max-regs 128 --json "$R/sweep_${m}_t3.json" \
    --tuned-out "$R/tuned_${m}_t3.json" > "$R/sweep_${m}_t3.txt" 2>&1
  echo "== sweep $m t3 rc=$? $((SECONDS - START)) s"; grep -E "^$m " "$R/sweep_${m}_t3.txt"; pack
done
arm() {  # arm NAME TILES MODEL
  tiles_arm "$1" "$2" "$3" --concurrency 2,3
}
tuned_ab t3 35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b
