#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): one lane at 1M positions with YaRN (factor 4 over the
# checkpoint's 262,144), 27B int4 weights, bf16 KV (64 GiB: `hinfer plan qwen3.6-27b --weights int4 --kv-dtype
# bf16 --rope-scaling yarn:4 --max-context 1048576 --max-concurrency 1`): decode at depth 1020K, then a 1020K-token
# prompt prefilled once, timed, on the cuDNN prefill attention (the 8K prompt before it warms the chunk's kernels).
# About 2.2e17 attention FLOPs: six minutes at 610 TFLOP/s, plus 1.5 for the rest at the 8K chunk's rate.
# Lands in $OUT/gpu_prefill_1m.tgz.
set -uo pipefail
PACK=gpu_prefill_1m; source "$(dirname "$0")/device_common.sh"
HINFER_PREFILL_CUDNN=1 BENCH_TIMEOUT=560 bench_as prefill_1m "$PWD" qwen3.6-27b --quant int4 --kv-dtype bf16 \
  --rope-scaling yarn:4 --depths 1020K --concurrency 1 --prefill 8K,1020K --prefill-repeats 1
grep -E "prefill|plan|KV|error|Error" "$R/prefill_1m.txt" | tail -8
