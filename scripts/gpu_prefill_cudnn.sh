#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): prefill attention on cuDNN by parts (HINFER_PREFILL_CUDNN=1,
# hinfer/ops/triton/attention_cudnn.py: the cached prefix in blocks without a mask, the chunk causal, the cache
# read back in bf16, log-sum-exp merge). Its GPU tests (blocks, a decode lane in front, every KV format), the
# kernels alone (bf16 and fp8 KV: the Triton prefill 320 / 215 TFLOP/s at 8K, SDPA's contiguous 660), then the 27B
# int4 prefill of one 128K prompt with bf16 KV on Triton and on cuDNN, and with fp8 KV on cuDNN (Triton 5,088 tok/s,
# 2026-12-04 18:35 UTC). Lands in $OUT/gpu_prefill_cudnn.tgz.
set -uo pipefail
PACK=gpu_prefill_cudnn; source "$(dirname "$0")/device_common.sh"
gpu_tests test_cudnn 150 tests/gpu/test_norm_attention_kernels.py -k "cudnn" || exit 0
for kv in bf16 fp8; do
  left 170 || break
  timeout 70 python bench/attention_kernels.py --only prefill --kv-dtype $kv --json "$R/attn_prefill_$kv.json" \
    > "$R/attn_prefill_$kv.txt" 2>&1
  echo "== kernel $kv rc=$? $((SECONDS - START)) s"; grep -E "^prefill|cuDNN" "$R/attn_prefill_$kv.txt"; pack
done
prefill() {  # prefill NAME CUDNN KV: 27B int4, one 128K prompt
  ( export HINFER_PREFILL_CUDNN=$2
    BENCH_TIMEOUT=110 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype "$3" --concurrency 1 --depths "" \
      --prefill 128K --prefill-repeats 1; grep -E "prefill|cuDNN" "$R/$1.txt" | tail -3 )
}
left 260 && prefill prefill_cudnn_bf16 1 bf16
left 340 && prefill prefill_triton_bf16 0 bf16
left 420 && prefill prefill_cudnn_fp8 1 fp8
