#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): long context at 27B shapes, int4 weights. One lane's prefill
# of 128K and 256K prompts with fp8 KV (chunked prefill over the cached prefix, beside the FLOP floor; one timed run
# a length: 128K took 27 s, and three runs of 256K did not fit a step of 220 s), then one lane decoding 1,020K deep
# with YaRN (factor 4: 1,048,576 positions) and k8v4 KV (random KV at that depth; 39.1 tok/s on 2026-12-04 before
# k8v4's decode tile), then the same prefills with k8v4 KV as time allows. Lands in $OUT/gpu_long_context.tgz.
set -uo pipefail
PACK=gpu_long_context; source "$(dirname "$0")/device_common.sh"
BENCH_TIMEOUT=220 bench_as prefill_fp8 "$PWD" qwen3.6-27b --quant int4 --kv-dtype fp8 --concurrency 1 --depths "" \
  --prefill 128K,256K --prefill-repeats 1
grep -E "prefill" "$R/prefill_fp8.txt" | tail -3
left 300 && BENCH_TIMEOUT=120 bench_as decode_1m_yarn "$PWD" qwen3.6-27b --quant int4 --kv-dtype k8v4 \
  --rope-scaling yarn:4 --concurrency 1 --depths 1020K --prefill ""
left 330 && { BENCH_TIMEOUT=$((540 - (SECONDS - START))) bench_as prefill_k8v4 "$PWD" qwen3.6-27b --quant int4 \
  --kv-dtype k8v4 --concurrency 1 --depths "" --prefill 128K,256K --prefill-repeats 1; grep -E "prefill" "$R/prefill_k8v4.txt" | tail -3; }
