#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the fused GDN step's tiles swept again now that it runs
# verification's 4 tokens a sequence (an eight-lane MTP round spends 2.6 ms in it, 54 us a layer against ~20 at one
# token; FUSED_TILES keys its tile on the sequences only); Nsight Compute on the 32-row int4 warpgroup-MMA kernel
# at gate_up with x copied a group at a time (the packaged tile since) and through registers (same tile), to see
# why the copy wins on 4 warps there and loses elsewhere; the 35B-A3B's and 122B-A10B's dense shapes at 32 rows
# with x rings. Lands in $OUT/gpu_gdn_verify_tiles.tgz.
set -uo pipefail
PACK=gpu_gdn_verify_tiles; source "$(dirname "$0")/device_common.sh"
timeout 220 python bench/gdn_kernels.py --sweep-decode --bvs 8,16,32,64,128 > "$R/gdn_sweep.txt" 2>&1
echo "== gdn sweep rc=$? $((SECONDS - START)) s"; grep -E "BV=|sweep|verify|fused" "$R/gdn_sweep.txt" | tail -30; pack
left 300 && ncu_run ncu_gate_up_m32_ring1 int4_wgmma_kernel 60 bench/int4_mma_ncu.py --shape gate_up --m 32 --wgmma \
  --tile 64,32,1,4,1,1
left 360 && ncu_run ncu_gate_up_m32_ring0 int4_wgmma_kernel 60 bench/int4_mma_ncu.py --shape gate_up --m 32 --wgmma \
  --tile 64,32,1,4,1,0
for cfg in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  left 440 || break
  timeout 90 python bench/int4_wgmma.py --config $cfg --ms 32 --rings 0,1 --json "$R/sweep_$cfg.json" \
    --tiles "$R/sweep_${cfg}_tiles.json" > "$R/sweep_$cfg.txt" 2>&1
  echo "== sweep $cfg rc=$? $((SECONDS - START)) s"; grep -E "M=" "$R/sweep_$cfg.txt" | grep -v "^  " | cut -c1-60,150-400; pack
done
