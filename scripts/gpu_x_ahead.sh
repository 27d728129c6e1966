#!/usr/bin/env bash
# One device call: the int4 tensor-core kernels' register loops loading each group's x with the look-ahead's
# weights (HINFER_INT4_X_AHEAD=1) against loading it just before the group's MMA (Nsight Compute put the one-token
# experts gate_up at 7.3 of its cycles per instruction waiting on L1 for x): GPU tests of the int4 dense and
# experts kernels with it on, then 35B-A3B, 122B-A10B and 27B int4 decode at 1 and 8 lanes each way.
# Lands in $OUT/gpu_x_ahead.tgz.
set -uo pipefail
PACK=gpu_x_ahead; source "$(dirname "$0")/device_common.sh"
HINFER_INT4_X_AHEAD=1 timeout 200 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider \
  tests/gpu/test_moe_kernels.py tests/gpu/test_int4_mma.py -k "int4 or mma" > "$R/tests.txt" 2>&1
echo "== GPU tests (x ahead) rc=$?"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12; pack
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b" "27b qwen3.6-27b"; do
  set -- $m
  left 420 && HINFER_INT4_X_AHEAD=0 decode_bench "$1_x_at_group" "$2"
  left 460 && HINFER_INT4_X_AHEAD=1 decode_bench "$1_x_ahead" "$2"
done
