#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the 1-byte KV tiles read a 32-bit word at a time and turned
# two values an instruction (built 2026-12-04 after the day's calls). int4: nibbles ORed under the exponent where
# fp16 / bf16 count in ones; on bf16 dots only the values take it (keys keep the exact fp32 product: with keys too,
# the first run at 16:37 UTC failed the int4 prefill case at rel 1.45e-2). The f16 form: int8 keys and values by a
# byte permute under 0x64, fp8 values by packed conversions in the row layout (the dot reads them by ldmatrix
# instead of gathering bytes). sm_90 SASS per 64-key loop, f16 form: fp8 1,160 -> 882 instructions, int8 1,856 ->
# 1,419, k8v4 1,679 -> 1,513, int4 1,774 -> 1,623; bf16 dots: k8v4 1,890 -> 1,584, int4 2,165 -> 1,848.
# The unpacks' and the formats' GPU tests, then per format the kernel alone on the packaged tiles (one lane x 128K,
# eight x 128K, eight x 4 tokens at 32K; before, us: fp8 102.2 / 622.0 / 224.2, int8 142.0 / 951.7 / 319.1, k8v4
# 171.6 / 1,197.5 / 369.7, int4 155.9 / 1,087.2 / 394.3), then 27B int4 decode at one and eight lanes x 128K
# (before, tok/s: fp8 146.0 / 441.6, int8 132.6 / 346.5, k8v4 124.4 / 295.3, int4 127.8 / 315.4). The tiles'
# winners may move with the registers freed (fp8 203 -> 180, int8 255 -> 196): `SWEEP_S=160 bash
# scripts/gpu_kv_f16.sh` re-sweeps them. Lands in $OUT/gpu_kv_words.tgz.
# The inline-PTX forms are behind HINFER_KV_WORDS=all (the default `int4` reads only int4 tiles by words): every
# run below sets it, so int4 / k8v4 measure the default and fp8 / int8 the PTX forms; flip the default if they win.
set -uo pipefail
PACK=gpu_kv_words; source "$(dirname "$0")/device_common.sh"
export HINFER_KV_WORDS=all
gpu_tests test_words 150 tests/gpu/test_norm_attention_kernels.py \
  -k "int4_words or byte_words or kv_formats or f16_tiles" || exit 0
for kv in fp8 int8 k8v4 int4; do
  left 270 || break
  timeout 40 python bench/attention_kernels.py --only decode --kv-dtype $kv --decode-case 1,131072,1 \
    --decode-case 8,131072,1 --decode-case 8,32768,4 --json "$R/attn_words_$kv.json" > "$R/attn_words_$kv.txt" 2>&1
  echo "== kernel $kv rc=$? $((SECONDS - START)) s"; grep -E "^decode" "$R/attn_words_$kv.txt"; pack
done
for kv in fp8 int8 k8v4 int4; do
  left 480 && BENCH_TIMEOUT=40 bench_as "depth_$kv" "$PWD" qwen3.6-27b --quant int4 --kv-dtype $kv --concurrency 1,8 \
    --depths 128K --prefill ""
done
