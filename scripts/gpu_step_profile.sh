#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache; an H100 serves, an H200 is better): where a decode step goes
# on the landed tree, by kernel (bench/profile_decode.py, PDL on, the exposed column), the 27B int4 at one and
# eight lanes (eight lanes run at 64% of their floor against 75% at one on an H100, bench/RESULTS.md 2026-12-06
# 11:22; the last eight-lane profile is from 2026-12-01), its MTP round at K = 3 and eight lanes (1.71x a plain
# step; the line is 1.5x), and the 35B-A3B int4 at one and eight lanes. Lands in $OUT/gpu_step_profile.tgz.
set -uo pipefail
PACK=gpu_step_profile; source "$(dirname "$0")/device_common.sh"
profile() {  # profile NAME SECONDS ARGS...
  local name=$1 seconds=$2; shift 2
  timeout "$seconds" python bench/profile_decode.py --pdl "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; grep -E "^(step|round)|exposed" "$R/$name.txt" | head -4; pack
}
left 60 && profile int4_27b_c8 90 --config qwen3.6-27b --quant int4 --lanes 8
left 150 && profile int4_27b_c1 80 --config qwen3.6-27b --quant int4 --lanes 1
left 230 && profile int4_27b_mtp_c8 100 --config qwen3.6-27b --quant int4 --spec-k 3 --lanes 8
left 330 && profile int4_35b_c8 80 --config qwen3.6-35b-a3b --quant int4 --lanes 8
left 410 && profile int4_35b_c1 80 --config qwen3.6-35b-a3b --quant int4 --lanes 1
# the experts' decode kernel changed (its fragment-order branch removed) since its GPU tests last ran
left 490 && gpu_tests moe_kernels 90 tests/gpu/test_moe_kernels.py
