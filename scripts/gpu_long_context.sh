#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the long-context table at 27B shapes, int4 weights, per KV
# format (FORMATS, default "fp8 k8v4 int8 int4"): decode at one and eight lanes x 1K / 128K / 256K (random KV at
# depth), then one lane's prefill of 8K (warms the chunk's kernels), 128K and 256K prompts, one timed run each, long
# chunks' attention on cuDNN (the default for planned shapes: the 128K prompt took 17 s on 2026-12-05, the 256K
# about 45 s expected). About two minutes a format; each format's run is skipped once too little of the call is left. Lands in
# $OUT/gpu_long_context.tgz.
set -uo pipefail
PACK=gpu_long_context; source "$(dirname "$0")/device_common.sh"
for kv in ${FORMATS:-fp8 k8v4 int8 int4}; do
  left 400 || break
  BENCH_TIMEOUT=$((560 - (SECONDS - START))) bench_as "long_$kv" "$PWD" qwen3.6-27b \
    --quant int4 --kv-dtype "$kv" --depths 1K,128K,256K --concurrency 1,8 --prefill 8K,128K,256K --prefill-repeats 1
  grep -E "prefill [0-9]" "$R/long_$kv.txt" | sed -E 's/^.*INFO hinfer.bench: //'
done
