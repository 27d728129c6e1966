#!/usr/bin/env bash
# One device call (about six minutes): --lm-head keep / fp8 / int4 on the int4 35B-A3B and 27B at 1 and 8 lanes
# (the head is ~10% / ~8% of their steps in bf16), then the int4 head's tiles at 1 and 8 rows swept (its shape
# runs the packaged heuristic until then). Lands in $OUT/gpu_lm_head.tgz.
set -uo pipefail
PACK=gpu_lm_head; source "$(dirname "$0")/device_common.sh"
for m in "35b qwen3.6-35b-a3b" "27b qwen3.6-27b"; do
  set -- $m
  for head in keep fp8 int4; do
    left 240 && decode_bench "$1_head_$head" "$2" --lm-head "$head"
  done
done
left 250 && timeout 100 python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --shapes lm_head --ms 1,8 \
  --splits 1,2 --tuned-out "$R/tuned_lm_head_35b.json" > "$R/sweep_lm_head_35b.txt" 2>&1
echo "== sweep rc=$?"; grep -E " M=.*default" "$R/sweep_lm_head_35b.txt"; pack
