#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): the MoE models' packaged lines at one to four lanes, the
# experts' gate_up routing up to three tokens (FUSIONS' `route`, `down_route`, `slot_sum`, `route_fp8`: 3) against
# one token (HINFER_FUSION_ROWS=...=1), alternated: the 122B-A10B at int4 (8 + 1 slots; measured only on the
# 35B-A3B so far: two / three lanes +3.9% / +3.2% on an H100), then the 35B-A3B at int4 and fp8 (the fp8 experts'
# four- and 32-token tiles packaged 2026-12-06). `hinfer bench MODEL --quant Q --concurrency 1,2,3,4 --depths 1K
# --prefill ""`. Lands in $OUT/gpu_moe_lanes.tgz.
set -uo pipefail
PACK=gpu_moe_lanes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
ONE="route=1,down_route=1,slot_sum=1,route_fp8=1"
arm() {  # arm NAME ROWS MODEL QUANT
  HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=70 bench_as "$1" "$PWD" "$3" --quant "$4" --concurrency 1,2,3,4 \
    --depths 1K --prefill ""
}
for round in a b; do
  left 250 && arm "122b_one_$round" "$ONE" qwen3.5-122b-a10b int4
  left 300 && arm "122b_three_$round" "" qwen3.5-122b-a10b int4
done
left 380 && arm 35b_int4_one "$ONE" qwen3.6-35b-a3b int4
left 420 && arm 35b_int4_three "" qwen3.6-35b-a3b int4
left 460 && arm 35b_fp8_one "$ONE" qwen3.6-35b-a3b fp8
left 500 && arm 35b_fp8_three "" qwen3.6-35b-a3b fp8
