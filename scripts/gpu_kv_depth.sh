#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): the KV formats' first GPU run. Their attention GPU tests
# (decode / verify / prefill kernels reading fp8, int8, k8v4 and int4 KV against the torch reference; the quantizing
# q/k norm + rope + write kernel; graph replay), then 27B int4 decode at depth 1K, 128K and 256K, one and eight
# lanes, per format (random KV at each lane's depth, no prefill), bf16 KV at one lane (eight lanes at 256K do not fit
# beside it). Lands in $OUT/gpu_kv_depth.tgz.
set -uo pipefail
PACK=gpu_kv_depth; source "$(dirname "$0")/device_common.sh"
gpu_tests test_kv_formats 120 tests/gpu/test_norm_attention_kernels.py -k "kv_formats or quantized" || exit 0
for kv in fp8 k8v4 int4 int8; do
  left 330 || break
  BENCH_TIMEOUT=80 bench_as "kv_$kv" "$PWD" qwen3.6-27b --quant int4 --kv-dtype $kv --depths 1K,128K,256K \
    --concurrency 1,8 --prefill ""
done
left 370 && BENCH_TIMEOUT=60 bench_as kv_bf16 "$PWD" qwen3.6-27b --quant int4 --depths 1K,128K,256K --concurrency 1 \
  --prefill ""
