#!/usr/bin/env bash
# One device call (about five minutes): the int4 kernel's words prefetched into L2 ahead of the PDL wait
# (HINFER_INT4_PREFETCH_MB: weights up to that size; 0, the default, none): its GPU test, then int4 decode at 1 and
# 8 lanes on the 35B-A3B (dense matrices of 4-13 MB, each launch a DRAM round trip), the 27B and the 122B-A10B
# with budgets 0 / 16 / 64 MB. Lands in $OUT/gpu_l2_prefetch.tgz.
set -uo pipefail
PACK=gpu_l2_prefetch; source "$(dirname "$0")/device_common.sh"
timeout 90 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_int4_mma.py \
  -k "l2_prefetch or x_ahead" > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -8; pack
for m in "35b qwen3.6-35b-a3b" "27b qwen3.6-27b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  for mb in 0 16 64; do
    left 330 && HINFER_INT4_PREFETCH_MB=$mb decode_bench "$1_prefetch_$mb" "$2"
  done
done
