#!/usr/bin/env bash
# One device call for the int4 warpgroup-MMA kernel (hinfer/ops/triton/linear_int4_wgmma.py): its GPU tests, then
# its tiles against the mma.sync kernel at 1-32 rows of x at every 27B int4 shape, the wins written as tile
# entries (wgmma_tiles.json, HINFER_TILES form: an entry is where the kernel takes over), then the 27B int4
# decode and MTP rounds (K = 3, 1 and 8 lanes) with those entries, and the round's profile at one lane.
# Steps past their time guard are skipped. Everything lands in $OUT/gpu_int4_wgmma.tgz.
set -uo pipefail
PACK=gpu_int4_wgmma; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -s tests/gpu/test_int4_wgmma.py -m gpu --tb=short -p no:cacheprovider \
  > "$R/tests.txt" 2>&1
echo "== wgmma tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
pack
timeout 290 python bench/int4_wgmma.py --ms 1,2,4,8,16,32 --json "$R/int4_wgmma.json" --tiles "$R/wgmma_tiles.json" \
  > "$R/int4_wgmma.txt" 2>&1
echo "== wgmma vs mma.sync rc=$?"; grep -E "^[a-z_]+ +M=|^    \(" "$R/int4_wgmma.txt"
pack
[ -s "$R/wgmma_tiles.json" ] || exit 0
export HINFER_TILES="$R/wgmma_tiles.json"
if left 440; then
  timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 --out "$R" > "$R/bench_27b_wgmma.txt" 2>&1
  echo "== 27B int4 + MTP, wgmma where it won rc=$?"; grep -E "decode C=|spec K=" "$R/bench_27b_wgmma.txt"
  pack
fi
if left 500; then
  timeout 70 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 > "$R/profile_spec_c1.txt" 2>&1
  echo "== profile, spec K=3, one lane rc=$?"; head -40 "$R/profile_spec_c1.txt"
  pack
fi
