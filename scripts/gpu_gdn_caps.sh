#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the fused GDN step under register caps. At eight lanes its
# 1,536 programs of two warps (the 27B) run at 247 registers, four an SM: 2.91 waves (bench/waves.py); under 168
# six fit, under 128 eight (sm_90 builds spill 192 / 360 bytes there). The step alone at each tile (bench/
# gdn_kernels.py --sweep-fused, 27B heads, one and eight lanes and eight lanes x 4 verify rows), then the fastest
# tile at eight lanes against the packaged one in the decode graph (HINFER_GDN_FUSED_TILES; the 27B and the 35B-A3B
# at int4, eight lanes, alternated), then the GDN GPU tests on it. Lands in $OUT/gpu_gdn_caps.tgz.
set -uo pipefail
PACK=gpu_gdn_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 200 python bench/gdn_kernels.py --cs 1,8 --best-out "$R/best.txt" \
  --sweep-fused "${TILES:-32:2:0,32:2:168,32:2:128,16:1:0,16:1:168,16:1:128,16:2:0,16:2:128,64:4:0,64:4:128}" \
  > "$R/sweep.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "BV=|fastest" "$R/sweep.txt"; pack
best=$(cat "$R/best.txt" 2>/dev/null || echo "inf:32:2:0")
arm() {  # arm NAME MODEL [TILES]
  HINFER_GDN_FUSED_TILES="${3:-}" BENCH_TIMEOUT=70 bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 8 \
    --depths 1K --prefill ""
}
for round in a b; do
  left 330 && arm "27b_packaged_$round" qwen3.6-27b
  left 360 && arm "27b_best_$round" qwen3.6-27b "2:16:1,$best"
  left 390 && arm "35b_packaged_$round" qwen3.6-35b-a3b
  left 420 && arm "35b_best_$round" qwen3.6-35b-a3b "2:16:1,$best"
done
left 480 && HINFER_GDN_FUSED_TILES="2:16:1,$best" gpu_tests gdn_tests 75 tests/gpu/test_gdn_kernels.py -k fused_step
