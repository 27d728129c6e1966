#!/usr/bin/env bash
# One short device call: int4 decode at 1 and 8 lanes (depth 1K) of 27B, 35B-A3B and 122B-A10B with the packaged
# defaults, one `hinfer bench` each. Everything lands in $OUT/gpu_defaults_decode.tgz.
set -uo pipefail
PACK=gpu_defaults_decode; source "$(dirname "$0")/device_common.sh"
for m in qwen3.6-35b-a3b qwen3.5-122b-a10b qwen3.6-27b; do
  left "${BUDGET:-200}" || break
  decode_bench "bench_$m" $m
done
