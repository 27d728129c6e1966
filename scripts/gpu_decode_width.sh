#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache; an H100 serves): decode on a server's graphs. The split
# decode's split count follows its graph's page-table width (cuda_graphs.page_widths: 4,096 and 32,768 tokens and
# the context), so at a short depth most splits hold no keys; they used to write zero partial rows that the combine
# then merged one by one. The 35B-A3B int4 at one lane ran 510.7 tok/s with an 8K prefill point beside it (its
# 4,096-token graph: 64 splits) against 522.6 without (1,104 tokens: 18 splits), the same kernels otherwise
# (bench/RESULTS.md 2026-12-07 17:06). First the GPU tests (the split decode on a 262,144-token page table, the
# experts on stripes as the engine places them, the down reading early on stripes), then the 35B-A3B and the 27B
# int4 at one and eight lanes, --max-context 262144, the tree before the change (.kcache/ab: this tree's package
# with 5cb799b's hinfer/ops/triton/attention_decode.py) against this one, alternated; then this one at the points'
# own width. Lands in $OUT/gpu_decode_width.tgz.
# Before the call, here: mkdir -p .kcache/ab && git archive HEAD hinfer | tar -x -C .kcache/ab && git show \
#   5cb799b:hinfer/ops/triton/attention_decode.py > .kcache/ab/hinfer/ops/triton/attention_decode.py
set -uo pipefail
PACK=gpu_decode_width; source "$(dirname "$0")/device_common.sh"
gpu_tests width_tests 130 tests/gpu/test_norm_attention_kernels.py -k "wide_page_table or test_decode or verify"
gpu_tests stripes_tests 150 tests/gpu/test_engine_gpu.py tests/gpu/test_moe_kernels.py -k \
  "folded_moe or quantized_layers and 35b or down_early"
arm() {  # arm NAME PYPATH MODEL [ARGS...]
  local name=$1 path=$2 model=$3; shift 3
  BENCH_TIMEOUT=70 bench_as "$name" "$path" "$model" --quant int4 --concurrency 1,8 --depths 1K --prefill "" "$@"
}
[ -d .kcache/ab/hinfer ] || { echo "no .kcache/ab: the A/B needs the older tree"; exit 0; }
for round in a b; do
  left 470 && arm "35b_before_$round" ".kcache/ab:$PWD" qwen3.6-35b-a3b --max-context 262144
  left 490 && arm "35b_after_$round" "$PWD" qwen3.6-35b-a3b --max-context 262144
done
left 500 && arm 35b_after_narrow "$PWD" qwen3.6-35b-a3b
left 500 && arm 27b_before_a ".kcache/ab:$PWD" qwen3.6-27b --max-context 262144
left 530 && arm 27b_after_a "$PWD" qwen3.6-27b --max-context 262144
