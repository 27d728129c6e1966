#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): where every model and weight format stands, as the
# quantized-weights and MoE-decode lines are written (one `hinfer bench` run per line, depth 1K, one and eight
# lanes, an 8K prompt's prefill; the packaged defaults, prefill attention on cuDNN for planned shapes): the 27B at
# int4, fp8 and bf16, the 35B-A3B and the 122B-A10B at int4. The cuDNN prefill GPU tests first. Lands in
# $OUT/gpu_headline.tgz.
set -uo pipefail
PACK=gpu_headline; source "$(dirname "$0")/device_common.sh"
gpu_tests test_cudnn 90 tests/gpu/test_norm_attention_kernels.py -k "prefill_cudnn" || exit 0
line() {  # line NAME MODEL QUANT [SECONDS]
  left $((590 - ${4:-80})) && BENCH_TIMEOUT=${4:-80} bench_as "$1" "$PWD" "$2" --quant "$3" --concurrency 1,8 \
    --depths 1K --prefill 8K && grep -E "prefill 8192" "$R/$1.txt" | sed -E 's/^.*INFO hinfer.bench: //'
}
line int4_27b qwen3.6-27b int4
line fp8_27b qwen3.6-27b fp8
line int4_35b qwen3.6-35b-a3b int4
line int4_122b qwen3.5-122b-a10b int4 100
line bf16_27b qwen3.6-27b bf16
