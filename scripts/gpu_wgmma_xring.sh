#!/usr/bin/env bash
# One device call (under nine minutes, carry .kcache): the int4 warpgroup-MMA kernel with x copied a few groups at a
# time (cp.async into two buffers, one barrier a chunk; the tile's `ring`) against x through registers (two
# barriers a group: Nsight Compute put barrier stalls first at 32 rows). Its GPU tests, the sweep at 32 rows with
# rings 0 / 1 / 2 / 4 in one process, an eight-lane MTP round and eight-lane decode with the sweep's winners
# (HINFER_TILES) against the packaged tiles, then the sweep at 8 and 16 rows. Lands in $OUT/gpu_wgmma_xring.tgz.
set -uo pipefail
PACK=gpu_wgmma_xring; source "$(dirname "$0")/device_common.sh"
gpu_tests test_int4_wgmma 150 tests/gpu/test_int4_wgmma.py || exit 0
sweep() {  # NAME MS RINGS SECONDS
  timeout "$4" python bench/int4_wgmma.py --ms "$2" --rings "$3" --json "$R/$1.json" --tiles "$R/$1_tiles.json" \
    > "$R/$1.txt" 2>&1
  echo "== sweep $1 rc=$? $((SECONDS - START)) s"; grep -E "M=" "$R/$1.txt" | grep -v "  " | \
    sed -E 's/SkinnyConfig\(block_n=([0-9]+), block_k=128, block_m=([0-9]+), split_k=([0-9]+), num_warps=([0-9]+), num_stages=[0-9]+, ring=([0-9]+)[^)]*\)/[\1 \2 s\3 w\4 r\5]/g'
  pack
}
sweep sweep_m32 32 0,1,2,4 230
spec() {  # NAME [TILES]
  HINFER_TILES="${2:-}" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --spec mtp --spec-k 3 \
    --concurrency 8 --depths 1K --prefill "" --steps 64
}
if [ -s "$R/sweep_m32_tiles.json" ]; then
  left 330 && spec spec_c8_packaged
  left 360 && spec spec_c8_xring "$R/sweep_m32_tiles.json"
  left 390 && spec spec_c8_packaged2
fi
sweep sweep_m8_16 8,16 0,2,4 $((520 - (SECONDS - START)))
