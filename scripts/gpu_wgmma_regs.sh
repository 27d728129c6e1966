#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): after the x ring measured a win at gate_up's 32 rows only
# (packaged since), the ring's tiles with registers capped (maxnreg 80: 128 rows of W on 8 warps fit 3 programs an
# SM, x in registers or copied a group at a time) swept at 32 and 16 rows, twice at 32 (the first sweep's rows
# spread by up to a fifth between neighbouring tiles); an eight-lane MTP round on the packaged tiles against the
# second sweep's winners; then the records the packaged defaults changed (the int4 tail rows on up to 8 rows,
# gate_up's ring): 27B int4 and 35B-A3B int4 decode at 1 and 8 lanes. Lands in $OUT/gpu_wgmma_regs.tgz.
set -uo pipefail
PACK=gpu_wgmma_regs; source "$(dirname "$0")/device_common.sh"
gpu_tests test_int4_wgmma 100 tests/gpu/test_int4_wgmma.py -k "tiles or slices" || exit 0
sweep() {  # NAME MS RINGS REGS SECONDS
  timeout "$5" python bench/int4_wgmma.py --ms "$2" --rings "$3" --regs "$4" --json "$R/$1.json" \
    --tiles "$R/$1_tiles.json" > "$R/$1.txt" 2>&1
  echo "== sweep $1 rc=$? $((SECONDS - START)) s"; grep -E "M=" "$R/$1.txt" | grep -v "^  " | \
    sed -E 's/SkinnyConfig\(block_n=([0-9]+), block_k=128, block_m=([0-9]+), split_k=([0-9]+), num_warps=([0-9]+), num_stages=[0-9]+, ring=([0-9]+), fma_offset=False, x_ahead=False, max_regs=([0-9]+)[^)]*\)/[\1 \2 s\3 w\4 r\5 m\6]/g'
  pack
}
sweep sweep_m32_a 32 0,1 0,80 130
sweep sweep_m32_b 32 0,1 0,80 130
spec() {  # NAME [TILES]
  HINFER_TILES="${2:-}" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --spec mtp --spec-k 3 \
    --concurrency 8 --depths 1K --prefill "" --steps 64
}
left 330 && spec spec_c8_packaged
[ -s "$R/sweep_m32_b_tiles.json" ] && left 360 && spec spec_c8_swept "$R/sweep_m32_b_tiles.json"
left 400 && decode_bench decode_27b qwen3.6-27b
left 440 && decode_bench decode_35b qwen3.6-35b-a3b
left 470 && sweep sweep_m16 16 0,1 0,80 $((530 - (SECONDS - START)))
