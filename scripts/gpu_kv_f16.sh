#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the decode kernel's f16 form for the 1-byte KV formats (dots
# in fp16; int8 / int4 codes turned to fp16 by their bits under 1024's exponent, fp8 by its native fp16 conversion,
# none of the quarter-rate int / fp8 -> bf16 conversions: sm_90 SASS per loop, 2026-12-04: fp8 850 -> 653
# instructions, int8 1,101 -> 1,013, k8v4 996 -> 948, int4 1,132 -> 942). Its GPU tests, then per format the tile
# sweep with and without it (one lane x 128K, eight x 128K, eight x 4 tokens at 32K), each key's winner into one
# HINFER_TILES file, and 27B int4 decode at one and eight lanes x 128K on the packaged tiles and on the winners
# (packaged: fp8 135.9 / 369.9, k8v4 124.8 / 295.5, int4 125.0 / 299.0 tok/s). Lands in $OUT/gpu_kv_f16.tgz.
# KVS (default "int4 k8v4 fp8 int8") picks the swept formats, SWEEP_S (default 75) bounds each sweep (a cold kernel
# cache needs ~150), TILES_IN seeds the winners' file with an earlier call's, DEPTHS (default "int4 k8v4 fp8") the
# decode runs, SKIP_TESTS=1 leaves the tests out.
set -uo pipefail
PACK=gpu_kv_f16; source "$(dirname "$0")/device_common.sh"
[ -n "${TILES_IN:-}" ] && cp "$TILES_IN" "$R/f16_tiles.json"
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests test_f16 120 tests/gpu/test_norm_attention_kernels.py -k "f16_tiles or kv_formats" || exit 0
fi
for kv in ${KVS:-int4 k8v4 fp8 int8}; do
  left 330 || break
  timeout "${SWEEP_S:-75}" python bench/attention_kernels.py --only decode --sweep decode --kv-dtype $kv --f16 \
    --decode-case 1,131072,1 --decode-case 8,131072,1 --decode-case 8,32768,4 \
    --json "$R/attn_f16_$kv.json" --tuned-out "$R/f16_tiles.json" > "$R/attn_f16_$kv.txt" 2>&1
  echo "== f16 sweep $kv rc=$? $((SECONDS - START)) s"; grep -A3 "tile per key" "$R/attn_f16_$kv.txt"; pack
done
depth() {  # depth NAME KV [TILES]: 27B int4 decode at 128K, one and eight lanes (on TILES' tiles when given)
  ( [ -n "${3:-}" ] && export HINFER_TILES="$3"
    BENCH_TIMEOUT=45 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype "$2" --concurrency 1,8 --depths 128K \
      --prefill "" )
}
for kv in ${DEPTHS:-int4 k8v4 fp8}; do
  left 500 && [ -s "$R/f16_tiles.json" ] && depth "depth_${kv}_f16" $kv "$R/f16_tiles.json"
done
pack
