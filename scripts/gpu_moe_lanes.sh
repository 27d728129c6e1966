#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the int4 MoE models' packaged lines at one to four and eight
# lanes, a MoE layer's expert rows summed by the next add + norm launch (`norm_slots`, the default since
# 2026-12-06 20:07: the 35B-A3B one lane +2.5% on an H100) against the down launch's own sum at one to three tokens
# and a sum launch beyond (HINFER_FUSION_ROWS=norm_slots=0), alternated: the 122B-A10B (not yet measured), then the
# 35B-A3B. `hinfer bench MODEL --quant int4 --concurrency 1,2,3,4,8 --depths 1K --prefill ""`. Lands in
# $OUT/gpu_moe_lanes.tgz.
set -uo pipefail
PACK=gpu_moe_lanes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
arm() {  # arm NAME ROWS MODEL
  HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=70 bench_as "$1" "$PWD" "$3" --quant int4 --concurrency 1,2,3,4,8 \
    --depths 1K --prefill ""
}
for round in a b; do
  left 200 && arm "122b_apart_$round" "norm_slots=0" qwen3.5-122b-a10b
  left 240 && arm "122b_norm_$round" "" qwen3.5-122b-a10b
  left 280 && arm "35b_apart_$round" "norm_slots=0" qwen3.6-35b-a3b
  left 320 && arm "35b_norm_$round" "" qwen3.6-35b-a3b
done
