#!/usr/bin/env bash
# One short device call (about three minutes, carry .kcache): the one-launch int4 experts' GPU test on its packaged
# tile, one pair of 35B-A3B one-lane decodes (two launches, one), then a layer's parts (bench/moe_one_launch.py: the
# gate_up launch routing its token against given its ids says what the route costs). Lands in
# $OUT/gpu_moe_one_check.tgz.
set -uo pipefail
PACK=gpu_moe_one_check; source "$(dirname "$0")/device_common.sh"
gpu_tests test_one_launch 70 tests/gpu/test_moe_kernels.py -k "one_launch and 35b" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=30 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 \
  --concurrency 1 --depths 1K --prefill "" --steps 128; }
left 100 && arm two_a ""
left 130 && arm one_a "one_launch=1"
left 150 && timeout 60 python bench/moe_one_launch.py --rounds 2 > "$R/parts.txt" 2>&1; grep -E "^  " "$R/parts.txt"; pack
