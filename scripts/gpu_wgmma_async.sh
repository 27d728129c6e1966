#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the int4 warpgroup-MMA kernel leaving each group's MMA in
# flight while the next group unpacks (`async_mma`, ring tiles; the waited form held the eight-lane MTP round's
# 32-row kernels at 24-40% of copy bandwidth). Its GPU tests (bit for bit the waited kernel), then the 27B shapes
# at 32 and 8 rows on the packaged tiles' blocks with the ring, a 128-register cap and the waits varied
# (bench/int4_wgmma.py --near), then the eight-lane MTP round on the sweep's tiles against the packaged ones.
# Lands in $OUT/gpu_wgmma_async.tgz.
set -uo pipefail
PACK=gpu_wgmma_async; source "$(dirname "$0")/device_common.sh"
gpu_tests async_tests 200 tests/gpu/test_int4_wgmma.py -k "async or 27b_shapes" || exit 0
left 330 && timeout $((420 - (SECONDS - START))) python bench/int4_wgmma.py --ms 32,8 --rings 0,1,2,4 --regs 0,128 \
  --async 0,1 --near --json "$R/near.json" --tiles "$R/tiles.json" > "$R/sweep.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "M=" "$R/sweep.txt" | tail -12; pack
# the eight-lane MTP round at K = 3 (32 rows through every 27B projection) on the sweep's tiles against the packaged
arm() {  # arm NAME TILES
  HINFER_TILES=$2 BENCH_TIMEOUT=70 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 8 \
    --depths 1K --prefill "" --steps 32
}
if [ -s "$R/tiles.json" ]; then
  left 440 && arm round_packaged ""
  left 515 && arm round_swept "$R/tiles.json"
fi
