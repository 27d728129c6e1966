#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the experts tiles packaged from the two-, three-, eight- and
# 32-token sweeps: the int4 experts' GPU tests on them, then the MoE models' line at one to eight lanes and the
# 35B-A3B's eight-lane MTP round at K = 3. Lands in $OUT/gpu_experts_packaged.tgz.
set -uo pipefail
PACK=gpu_experts_packaged; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_experts 130 tests/gpu/test_moe_kernels.py -k "int4"
left 300 && tiles_arm 35b_line "" qwen3.6-35b-a3b --concurrency 1,2,3,4,8
left 360 && tiles_arm 122b_line "" qwen3.5-122b-a10b --concurrency 1,2,3,4,8
left 420 && BENCH_TIMEOUT=80 bench_as 35b_mtp "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 \
  --concurrency 8 --depths 1K --prefill "" --steps 32
