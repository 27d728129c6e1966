#!/usr/bin/env bash
# One device call: x loaded ahead in the dense int4 kernel (now the default) against loading it just before,
# interleaved on the 27B and once on the 35B-A3B (route in the gate_up launch on by default); then where a
# decode step goes (35B-A3B int4 at 1 and 8 lanes, 27B int4 at 1 lane) and the int4 kernels' GPU tests.
# Lands in $OUT/gpu_step_profile.tgz.
set -uo pipefail
PACK=gpu_step_profile; source "$(dirname "$0")/device_common.sh"
for i in 1 2; do
  decode_bench "27b_xa_$i" qwen3.6-27b
  HINFER_INT4_X_AHEAD=0 decode_bench "27b_no_xa_$i" qwen3.6-27b
done
decode_bench 35b_default qwen3.6-35b-a3b
HINFER_INT4_X_AHEAD=0 decode_bench 35b_no_xa qwen3.6-35b-a3b
for p in "qwen3.6-35b-a3b 1" "qwen3.6-35b-a3b 8" "qwen3.6-27b 1"; do
  set -- $p
  left 400 && timeout 90 python bench/profile_decode.py --config "$1" --quant int4 --lanes "$2" \
    > "$R/profile_$1_c$2.txt" 2>&1
  echo "== profile $1 C=$2 rc=$?"; grep -iE "step|total" "$R/profile_$1_c$2.txt" | head -4; pack
done
left 420 && timeout 150 python -m pytest -q -m gpu --tb=short -p no:cacheprovider tests/gpu/test_int4_mma.py \
  tests/gpu/test_moe_kernels.py > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -12; pack
