#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): prefill attention on torch's FlashAttention-2 where a
# sequence's bf16 KV pages are consecutive (HINFER_PREFILL_FLASH=1, hinfer/ops/triton/attention_flash.py). Its GPU
# tests (consecutive and shuffled pages, a decode lane in front), the kernel alone beside the Triton prefill
# kernel (bf16 KV: 318 TFLOP/s at 8K, 305 at 124K cached + 2K; SDPA 660 at 8K), then the 27B int4 prefill of 128K
# with bf16 KV, Triton then flash (a fresh engine hands a prompt consecutive pages). Lands in
# $OUT/gpu_prefill_flash.tgz.
set -uo pipefail
PACK=gpu_prefill_flash; source "$(dirname "$0")/device_common.sh"
gpu_tests test_flash 150 tests/gpu/test_norm_attention_kernels.py -k "flash or test_prefill" || exit 0
left 200 && timeout 90 python bench/attention_kernels.py --only prefill --kv-dtype bf16 \
  --json "$R/attn_prefill_flash.json" > "$R/attn_prefill_flash.txt" 2>&1
echo "== kernel rc=$? $((SECONDS - START)) s"; grep -E "^prefill" "$R/attn_prefill_flash.txt"; pack
prefill() {  # prefill NAME FLASH: 27B int4, bf16 KV, one 128K prompt
  ( export HINFER_PREFILL_FLASH=$2
    BENCH_TIMEOUT=110 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --concurrency 1 --depths "" \
      --prefill 128K --prefill-repeats 1; grep -E "prefill" "$R/$1.txt" | tail -2 )
}
left 300 && prefill prefill_triton 0
left 420 && prefill prefill_flash 1
