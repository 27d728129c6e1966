#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): int4 KV tiles read a 32-bit word (8 values) at a time, the
# codes turned to fp16 / bf16 by their bits two at a time (sm_90 SASS per 64-key loop: the f16 form 1,774 ->
# 1,623 instructions; on bf16 dots, where only V takes it (keys keep their exact fp32 scaling), int4 2,165 ->
# 1,848, k8v4 1,890 -> 1,584). Its first run (16:37 UTC, keys too) failed the int4 prefill case at rel 1.45e-2.
# The unpack's and the formats' GPU tests, then the kernel alone on the packaged tiles (one lane x 128K, eight x
# 128K, eight x 4 tokens at 32K; before: int4 155.9 / 1,087.2 / 394.3 us, k8v4 171.6 / 1,197.5 / 369.7), then
# 27B int4 decode at one and eight lanes x 128K (before: int4 127.8 /
# 315.4, k8v4 124.4 / 295.3 tok/s). Lands in $OUT/gpu_kv_words.tgz.
set -uo pipefail
PACK=gpu_kv_words; source "$(dirname "$0")/device_common.sh"
gpu_tests test_words 110 tests/gpu/test_norm_attention_kernels.py -k "int4_words or kv_formats or f16_tiles" \
  || exit 0
for kv in int4 k8v4; do
  left 170 || break
  timeout 40 python bench/attention_kernels.py --only decode --kv-dtype $kv --decode-case 1,131072,1 \
    --decode-case 8,131072,1 --decode-case 8,32768,4 --json "$R/attn_words_$kv.json" > "$R/attn_words_$kv.txt" 2>&1
  echo "== kernel $kv rc=$? $((SECONDS - START)) s"; grep -E "^decode" "$R/attn_words_$kv.txt"; pack
done
for kv in int4 k8v4; do
  left 230 && BENCH_TIMEOUT=40 bench_as "depth_$kv" "$PWD" qwen3.6-27b --quant int4 --kv-dtype $kv --concurrency 1,8 \
    --depths 128K --prefill ""
done
