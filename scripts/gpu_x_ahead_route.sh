#!/usr/bin/env bash
# One device call, two tries at the one-token MoE path (both off by default until this call measures them):
# - HINFER_INT4_X_AHEAD=1: the int4 mma.sync kernels load each group's x ahead of its MMA (with the register
#   look-ahead's weights, or one group ahead beside the shared-memory ring; Nsight Compute put the one-token
#   experts gate_up at 7.3 of its cycles per instruction waiting on L1 for x);
# - the `route` launch fusion: the experts' gate_up launch routes the token itself (the route kernel's launch
#   saved, every warp repeating the top-k).
# GPU tests of both, then 35B-A3B / 122B-A10B (and 27B for x ahead) int4 decode at 1 and 8 lanes each way.
# Lands in $OUT/gpu_x_ahead_route.tgz.
set -uo pipefail
PACK=gpu_x_ahead_route; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  -k "routes_one_token or x_ahead" > "$R/tests_moe.txt" 2>&1
echo "== MoE tests rc=$?"; grep -E "^(FAILED|E )" "$R/tests_moe.txt" | head -12; pack
timeout 90 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_int4_mma.py -k x_ahead \
  > "$R/tests_int4.txt" 2>&1
echo "== int4 tests rc=$?"; grep -E "^(FAILED|E )" "$R/tests_int4.txt" | head -8; pack
ROUTE_ON=slot_sum,tail,gate,norm_linear,route
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 330 && decode_bench "$1_default" "$2"
  left 360 && HINFER_INT4_X_AHEAD=1 decode_bench "$1_x_ahead" "$2"
  left 390 && HINFER_FUSE_LAUNCHES=$ROUTE_ON decode_bench "$1_route" "$2" --concurrency 1
done
left 440 && decode_bench 27b_default qwen3.6-27b
left 480 && HINFER_INT4_X_AHEAD=1 decode_bench 27b_x_ahead qwen3.6-27b
