#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the decode kernel's q8 form for int8 keys (int8 and k8v4 KV:
# the queries rounded to int8 per row, the scores on int8 tensor cores from the key codes as stored, no key
# conversion; sm_90 SASS per 64-key loop int8 1,862 -> 1,291 instructions, k8v4 1,584 -> 1,173). Its GPU tests
# (against the reference scoring with the same rounded queries; prefill's q8 form too: int8 warpgroup MMA for
# the scores, SASS per 32-key loop k8v4 804 -> 735, shared memory 111 -> 70 KB), the kernels alone with q8 toggled
# (packaged: int8 190 / 959 / 323 us, k8v4 148 / 1,019 / 347 at one lane x 128K / eight x 128K / eight x 4
# tokens; int8's q8 form at 64 keys keeps 16 bytes of stack, at 32 none), then the 27B int4 decode at one and eight lanes x 128K on the q8 tiles (bench/results/tiles/decode-q8-*-27b.json; packaged: int8
# 133.3 / 345.2, k8v4 131.0 / 332.3 tok/s). Lands in $OUT/gpu_kv_q8.tgz.
set -uo pipefail
PACK=gpu_kv_q8; source "$(dirname "$0")/device_common.sh"
gpu_tests test_q8 150 tests/gpu/test_norm_attention_kernels.py -k "decode_tile_forms or prefill_q8" || exit 0
for kv in k8v4 int8; do
  left 200 || break
  timeout 150 python bench/attention_kernels.py --only decode --only prefill --q8 --kv-dtype $kv --decode-case 1,131072,1 \
    --decode-case 8,131072,1 --decode-case 8,32768,4 --json "$R/dec_q8_$kv.json" > "$R/dec_q8_$kv.txt" 2>&1
  echo "== kernels $kv rc=$? $((SECONDS - START)) s"; grep -E "^(decode|prefill)" "$R/dec_q8_$kv.txt"; pack
done
for kv in k8v4 int8; do
  left 360 || break
  BENCH_TIMEOUT=60 HINFER_TILES=bench/results/tiles/decode-q8-$kv-27b.json bench_as "depth_q8_$kv" "$PWD" \
    qwen3.6-27b --quant int4 --kv-dtype $kv --concurrency 1,8 --depths 128K --prefill ""
done
