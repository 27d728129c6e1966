#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the packaged fp8 tensor-core tiles and cuDNN prefill
# attention end to end. The 27B fp8 at one and eight lanes without the fp8 tensor-core kernel and with its packaged
# tiles (the sweep's 17 winners gave 101.9 / 654.1 tok/s, 2026-12-05 03:37 UTC; five of them spilled and were
# replaced), then the 27B int4 prefill of an 8K and a 32K prompt with attention on Triton and on cuDNN (one 128K
# prompt: 5,843 -> 7,747 tok/s, 2026-12-05 04:15 UTC). Lands in $OUT/gpu_fp8_tiles_prefill.tgz.
set -uo pipefail
PACK=gpu_fp8_tiles_prefill; source "$(dirname "$0")/device_common.sh"
left 200 && BENCH_TIMEOUT=75 HINFER_FP8_MMA=0 bench_as fp8_off "$PWD" qwen3.6-27b --quant fp8 --concurrency 1,8 \
  --depths 1K --prefill ""
left 280 && BENCH_TIMEOUT=75 bench_as fp8_tuned "$PWD" qwen3.6-27b --quant fp8 --concurrency 1,8 --depths 1K \
  --prefill ""
prefill() {  # prefill NAME CUDNN: 27B int4, one 8K and one 32K prompt
  ( export HINFER_PREFILL_CUDNN=$2
    BENCH_TIMEOUT=110 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --concurrency 1 --depths "" \
      --prefill 8K,32K --prefill-repeats 2; grep -E "prefill" "$R/$1.txt" | tail -4 )
}
left 390 && prefill prefill_triton 0
left 500 && prefill prefill_cudnn 1
