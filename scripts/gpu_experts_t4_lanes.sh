#!/usr/bin/env bash
# One device call (about three minutes, carry .kcache): the 35B-A3B's four-token experts tiles
# (bench/results/tiles/moe-t4/tuned_35b_t4.json, the sweep's winners at 36 pairs) against the packaged eight-token
# tiles they would replace, at four lanes of plain decode (36 pairs), two alternated rounds. Lands in
# $OUT/gpu_experts_t4_lanes.tgz.
set -uo pipefail
PACK=gpu_experts_t4_lanes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
for round in a b; do
  left 500 && tiles_arm "packaged_$round" "" qwen3.6-35b-a3b --concurrency 4
  left 500 && tiles_arm "t4_$round" "$PWD/bench/results/tiles/moe-t4/tuned_35b_t4.json" qwen3.6-35b-a3b --concurrency 4
done
