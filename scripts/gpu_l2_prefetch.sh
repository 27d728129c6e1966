#!/usr/bin/env bash
# One device call for the int4 kernels' L2 prefetch before the PDL wait (HINFER_INT4_L2_PREFETCH, off by default
# until measured): its GPU test, then 27B int4 decode (1 and 8 lanes) at 0 / 4 / 8 / 16 groups and the MTP rounds
# at the best, then 35B-A3B decode at 0 and 8. Everything lands in $OUT/gpu_l2_prefetch.tgz.
set -uo pipefail
PACK=gpu_l2_prefetch; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -s tests/gpu/test_int4_mma.py -m gpu -k l2_prefetch --tb=short -p no:cacheprovider \
  > "$R/tests.txt" 2>&1
echo "== l2 prefetch tests rc=$? $(grep -E 'passed|failed' "$R/tests.txt" | tail -1)"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
pack
for p in 0 4 8 16; do
  left 400 || break
  HINFER_INT4_L2_PREFETCH=$p decode_bench "bench_27b_prefetch$p" qwen3.6-27b
done
for p in 0 8; do
  left 500 || break
  HINFER_INT4_L2_PREFETCH=$p decode_bench "bench_35b_prefetch$p" qwen3.6-35b-a3b
done
