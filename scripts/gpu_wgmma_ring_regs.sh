#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): x copied 2 or 4 groups at a time lost at 32 rows, but those
# tiles also took 125-128 registers where one group a chunk took 96 (4 programs an SM instead of 5), so the sweep
# again at 32 rows with rings 0 / 1 / 2 / 4 and a register cap of 96 beside none; an MTP round at one and at eight
# lanes on the packaged tiles (the tail rows now on up to 8 rows: verification's 4), and at eight with the sweep's
# winners. Lands in $OUT/gpu_wgmma_ring_regs.tgz.
set -uo pipefail
PACK=gpu_wgmma_ring_regs; source "$(dirname "$0")/device_common.sh"
timeout 250 python bench/int4_wgmma.py --ms 32 --rings 0,1,2,4 --regs 0,96 --json "$R/sweep_m32.json" \
  --tiles "$R/sweep_m32_tiles.json" > "$R/sweep_m32.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "M=" "$R/sweep_m32.txt" | grep -v "^  " | \
  sed -E 's/SkinnyConfig\(block_n=([0-9]+), block_k=128, block_m=([0-9]+), split_k=([0-9]+), num_warps=([0-9]+), num_stages=[0-9]+, ring=([0-9]+), fma_offset=False, x_ahead=False, max_regs=([0-9]+)[^)]*\)/[\1 \2 s\3 w\4 r\5 m\6]/g'
pack
spec() {  # NAME LANES [TILES]
  HINFER_TILES="${3:-}" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --spec mtp --spec-k 3 \
    --concurrency "$2" --depths 1K --prefill "" --steps 64
}
left 330 && spec spec_c1 1
left 360 && spec spec_c8 8
[ -s "$R/sweep_m32_tiles.json" ] && left 390 && spec spec_c8_swept 8 "$R/sweep_m32_tiles.json"
