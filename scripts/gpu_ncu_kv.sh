#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): Nsight Compute on the decode attention kernel at eight lanes
# x 128K, 27B heads, packaged tiles: int4 (25% of its byte floor, kernel alone), k8v4 (40%), fp8 (82%); then int4
# and fp8 with their tiles read by words (bench/results/tiles/decode-words-*-27b.json), which cut the loop's
# sm_90 instructions by 8-24% yet ran 17-20% slower (2026-12-04 18:25 UTC): the report's shared-memory
# wavefronts and bank conflicts, stalls and occupancy say where. Lands in $OUT/gpu_ncu_kv.tgz.
set -uo pipefail
PACK=gpu_ncu_kv; source "$(dirname "$0")/device_common.sh"
for kv in int4 k8v4 fp8; do
  left 420 || break
  ncu_run "ncu_dec_$kv" _decode_kernel 90 bench/attention_kernels.py --only decode --kv-dtype $kv \
    --decode-case 8,131072,1 || exit 0
done
