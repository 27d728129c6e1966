#!/usr/bin/env bash
# One device call (about seven minutes): where a step and a round go now that the int4 x int8 kernel runs at one
# row. Nsight Compute on the fused GDN step (scripts/gpu_ncu_gdn.sh, its whole-row tiles swept), then the 27B int4
# MTP round at one lane (profile + trace gaps by host frame), and one-lane plain steps of the 27B and the
# 35B-A3B with PDL on. Lands in $OUT/gpu_where_now.tgz (the GDN part in $OUT/gpu_ncu_gdn.tgz).
set -uo pipefail
bash "$(dirname "$0")/gpu_ncu_gdn.sh"
PACK=gpu_where_now; source "$(dirname "$0")/device_common.sh"
START=0  # the budget counts from this script's start, the GDN part included
if left 400; then
  timeout 80 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 --trace "$R/spec_c1_trace.json.gz" \
    > "$R/profile_spec_c1.txt" 2>&1
  echo "== spec round profile rc=$?"; grep -E "^round|GPU busy" "$R/profile_spec_c1.txt"; grep -A8 "GPU idle" "$R/profile_spec_c1.txt"
  python bench/trace_gaps.py "$R/spec_c1_trace.json.gz" --units 5 --list 12 > "$R/trace_gaps_c1.txt" 2>&1
  head -20 "$R/trace_gaps_c1.txt"
  rm -f "$R/spec_c1_trace.json.gz"
  pack
fi
for model in qwen3.6-27b qwen3.6-35b-a3b; do
  left 500 || break
  timeout 70 python bench/profile_decode.py --config "$model" --quant int4 --lanes 1 --pdl > "$R/profile_$model.txt" 2>&1
  echo "== $model one-lane step profile rc=$?"; head -40 "$R/profile_$model.txt"
  pack
done
