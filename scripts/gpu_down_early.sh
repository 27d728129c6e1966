#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache; an H100 serves): the int4 experts' down reading its aligned
# blocks and first weights before its PDL wait (`down_early`, off until this measures it) against the down that
# waits first: its GPU test (a PDL graph bit for bit), then the 35B-A3B and the 122B-A10B at two, four and eight
# lanes, HINFER_FUSION_ROWS=down_early=0 against down_early=64, alternated. Lands in $OUT/gpu_down_early.tgz.
set -uo pipefail
PACK=gpu_down_early; source "$(dirname "$0")/device_common.sh"
gpu_tests down_early_test 120 tests/gpu/test_moe_kernels.py -k "down_early or down_routes" || exit 0
arm() {  # arm NAME MODEL ROWS
  HINFER_FUSION_ROWS="down_early=$3" BENCH_TIMEOUT=90 bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 2,4,8 \
    --depths 1K --prefill ""
}
for round in a b; do
  left 300 && arm "35b_wait_$round" qwen3.6-35b-a3b 0
  left 330 && arm "35b_early_$round" qwen3.6-35b-a3b 64
done
left 440 && arm 122b_wait_a qwen3.5-122b-a10b 0
left 500 && arm 122b_early_a qwen3.5-122b-a10b 64
