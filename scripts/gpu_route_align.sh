#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the tensor-core experts' alignment made by the route kernel's
# last program to finish (`route_align`, off until measured) instead of its own launch (`_align_small_kernel`: 99 us
# of a 4.46 ms one-lane 35B-A3B MTP round on an H100, 41 launches, 2026-12-05 profile), from four tokens on (below:
# the gate_up routes its tokens itself). The GPU test first (int4 and fp8, bit for bit to the two launches, a CUDA
# graph), then `hinfer bench qwen3.6-35b-a3b --quant Q --spec mtp --spec-k 3 --concurrency 1,4,8 --depths 1K
# --prefill "" --steps 64` with HINFER_FUSION_ROWS=route_align=64 against the default, alternated, int4 then fp8.
# Lands in $OUT/gpu_route_align.tgz.
set -uo pipefail
PACK=gpu_route_align; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_route_align 120 tests/gpu/test_moe_kernels.py -k "route_and_align" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant "$3" --spec mtp \
  --spec-k 3 --concurrency 1,4,8 --depths 1K --prefill "" --steps 64; }
for round in a b; do
  left 250 && arm "int4_apart_$round" "" int4
  left 290 && arm "int4_one_$round" "route_align=64" int4
done
left 360 && arm fp8_apart "" fp8
left 400 && arm fp8_one "route_align=64" fp8
