#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): x staged on by default where a program reads one row of x
# (HINFER_X_STAGED=one). The GPU test files it touches (the int4 experts, routed and PDL-chained, the dense int4
# kernels, the PDL chains), the 35B-A3B's MTP rounds at K = 3 with it off and on, then the 35B-A3B and 122B-A10B
# one- and eight-lane decode lines as landed. Lands in $OUT/gpu_x_staged_check.tgz.
set -uo pipefail
PACK=gpu_x_staged_check; source "$(dirname "$0")/device_common.sh"
gpu_tests test_experts 240 tests/gpu/test_moe_kernels.py -k "int4" || exit 0
gpu_tests test_dense 120 tests/gpu/test_int4_mma.py tests/gpu/test_pdl.py || exit 0
spec() { HINFER_X_STAGED="$2" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp \
  --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64; }
left 360 && spec spec_off off
left 410 && spec spec_one one
left 470 && BENCH_TIMEOUT=50 bench_as line_35b "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill ""
left 530 && BENCH_TIMEOUT=60 bench_as line_122b "$PWD" qwen3.5-122b-a10b --quant int4 --concurrency 1,8 --depths 1K \
  --prefill ""
