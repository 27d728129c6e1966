#!/usr/bin/env bash
# One device call for the int4 warpgroup-MMA kernel (hinfer/ops/triton/linear_int4_wgmma.py), run on no GPU yet:
# its GPU tests, its tiles against the mma.sync kernel at 8-64 rows (27B shapes), then the 27B int4 decode and
# MTP rounds (K = 3, 1 and 8 lanes) with verification rows (and 8-lane decode) on it (HINFER_INT4_WGMMA=8) and
# without, and (time allowing) the rounds with the MTP head in int4 (--quant int4-mtp). Steps past their time
# guard are skipped. Everything lands in $OUT/gpu_int4_wgmma.tgz.
set -uo pipefail
PACK=gpu_int4_wgmma; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s tests/gpu/test_int4_wgmma.py -m gpu --tb=short -p no:cacheprovider \
  > "$R/tests.txt" 2>&1
echo "== wgmma tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
pack
timeout 230 python bench/int4_wgmma.py --ms 8,32 --shapes gate_up,down,qkv --json "$R/int4_wgmma.json" > "$R/int4_wgmma.txt" 2>&1
echo "== wgmma vs mma.sync rc=$?"; grep -E "^[a-z_]+ +M=" "$R/int4_wgmma.txt"
pack
for rows in 0 8; do
  left 470 || break
  HINFER_INT4_WGMMA=$rows timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 \
    --concurrency 1,8 --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_27b_wgmma$rows.txt" 2>&1
  echo "== 27B int4 + MTP, HINFER_INT4_WGMMA=$rows rc=$?"; grep -E "decode C=|spec K=" "$R/bench_27b_wgmma$rows.txt"
  pack
done
if left 480; then  # the MTP head in int4 too (recipe int4-mtp): cheaper draft steps
  timeout 100 python -m hinfer bench qwen3.6-27b --quant int4-mtp --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_27b_int4_mtp.txt" 2>&1
  echo "== 27B int4-mtp + MTP rc=$?"; grep -E "decode C=|spec K=" "$R/bench_27b_int4_mtp.txt"
  pack
fi
