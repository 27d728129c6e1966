#!/usr/bin/env bash
# One device call (about four minutes): where the fused GDN decode step's 7-9 us a layer go (its state's bytes
# take ~1.5 us at the 27B's 48 heads): Nsight Compute on it at one and eight lanes with the packaged tiles
# (stall reasons per issued instruction, occupancy, memory), then the decode tile sweep's whole-row tiles
# (BV = V: the output norm without its second ticket and read-back; 8 and 16 warps, ~255 registers at 8 and
# 128 at 16 with 360 bytes of stack, compiled for sm_90 on the CPU). Lands in $OUT/gpu_ncu_gdn.tgz.
set -uo pipefail
PACK=gpu_ncu_gdn; source "$(dirname "$0")/device_common.sh"
NCU_SECTIONS="${NCU_SECTIONS/--launch-skip 2 /--launch-skip 20 }"  # past the bench's warm-up launches
for c in 1 8; do
  ncu_run "ncu_gdn_fused_c$c" _fused_kernel 90 bench/gdn_kernels.py --decode-only --cs "$c"
done
left 150 && timeout 150 python bench/gdn_kernels.py --sweep-decode --bvs 128 > "$R/gdn_sweep_bv128.txt" 2>&1
echo "== sweep rc=$?"; tail -4 "$R/gdn_sweep_bv128.txt"; pack
