#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): where a plain step goes now, at the lines still open. The 27B
# int4 at eight lanes (988.6 tok/s, 54% of floor, 2026-12-05; its one-lane step and eight-lane MTP round were
# profiled 2026-12-04), the 35B-A3B int4 at one and eight lanes (512.3 / 1,951.1: 30% / 39%; last profiled
# 2026-12-03), the 27B fp8 at one and eight lanes (101.7 / 676.0; never profiled), PDL on as served. Lands in
# $OUT/gpu_where_c8.tgz.
set -uo pipefail
PACK=gpu_where_c8; source "$(dirname "$0")/device_common.sh"
where() {  # where NAME MODEL QUANT LANES
  left 500 || return 0
  timeout 80 python bench/profile_decode.py --config "$2" --quant "$3" --lanes "$4" --pdl > "$R/$1.txt" 2>&1
  echo "== $1 rc=$? $((SECONDS - START)) s"; head -30 "$R/$1.txt"
  pack
}
where int4_27b_c8 qwen3.6-27b int4 8
where int4_35b_c8 qwen3.6-35b-a3b int4 8
where int4_35b_c1 qwen3.6-35b-a3b int4 1
where fp8_27b_c1 qwen3.6-27b fp8 1
where fp8_27b_c8 qwen3.6-27b fp8 8
