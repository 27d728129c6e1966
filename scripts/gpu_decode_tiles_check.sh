#!/usr/bin/env bash
# One short device call (about three minutes, carry .kcache): the packaged decode attention tiles per KV format
# (tuned.py, 2026-12-04) through their GPU tests (decode and verify per format against the reference), then 27B
# int4 decode at one and eight lanes x 128K per format on them. Lands in $OUT/gpu_decode_tiles_check.tgz.
set -uo pipefail
PACK=gpu_decode_tiles_check; source "$(dirname "$0")/device_common.sh"
gpu_tests test_decode_tiles 70 tests/gpu/test_norm_attention_kernels.py -k "decode or verify or kv_formats" || exit 0
for kv in bf16 k8v4 int4 fp8 int8; do
  left 170 || break
  BENCH_TIMEOUT=40 bench_as "depth_$kv" "$PWD" qwen3.6-27b --quant int4 --kv-dtype $kv --concurrency 1,8 \
    --depths 128K --prefill ""
done
