#!/usr/bin/env bash
# One device call (about six minutes): the fused GDN step reading its state block and slots ahead of the PDL
# wait (HINFER_GDN_EARLY=1; off by default until this measures it) against after it: its GPU tests, then int4
# decode at 1 and 8 lanes both ways on the 35B-A3B (30 GDN layers in a 2.2 ms step) and the 27B (48 in 6.9 ms),
# the decode tiles swept (BV = V included: each program normalising its own rows, no second ticket), then where a
# 35B-A3B one-lane step goes with PDL on and the default path (bench/profile_decode.py --pdl: each kernel's
# exposed time, its share of the step in the graph). Lands in $OUT/gpu_gdn_early.tgz.
set -uo pipefail
PACK=gpu_gdn_early; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_gdn_kernels.py -k fused \
  > "$R/tests_gdn.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests_gdn.txt" | head -8; pack
for m in "35b qwen3.6-35b-a3b" "27b qwen3.6-27b"; do
  set -- $m
  left 260 && decode_bench "$1_after_wait" "$2"
  left 280 && HINFER_GDN_EARLY=1 decode_bench "$1_early" "$2"
done
left 260 && HINFER_GDN_EARLY=1 timeout 60 python bench/gdn_kernels.py --sweep-decode > "$R/gdn_sweep.txt" 2>&1
echo "== gdn sweep rc=$?"; grep -E "BV=" "$R/gdn_sweep.txt"; pack
left 320 && timeout 70 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --lanes 1 --pdl \
  > "$R/profile_35b_c1_pdl.txt" 2>&1
echo "== profile rc=$?"; grep -A14 "GPU busy" "$R/profile_35b_c1_pdl.txt" | head -16; pack
