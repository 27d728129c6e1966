#!/usr/bin/env bash
# One device call (about four minutes): where the fused GDN decode step's 7-9 us a layer go (its state's bytes
# take ~1.5 us at the 27B's 48 heads): Nsight Compute on it at one and eight lanes with the packaged tiles
# (stall reasons per issued instruction, occupancy, memory), then the decode tile sweep's whole-row tiles
# (BV = V: the output norm without its second ticket and read-back; 8 and 16 warps, ~255 registers at 8 and
# 128 at 16 with 360 bytes of stack, compiled for sm_90 on the CPU). Lands in $OUT/gpu_ncu_gdn.tgz.
set -uo pipefail
PACK=gpu_ncu_gdn; source "$(dirname "$0")/device_common.sh"
SECTIONS="--launch-skip 20 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
if command -v ncu > /dev/null; then
  for c in 1 8; do
    timeout 90 ncu --kernel-name _fused_kernel $SECTIONS python bench/gdn_kernels.py --decode-only --cs "$c" \
      > "$R/ncu_gdn_fused_c$c.txt" 2>&1
    echo "== ncu C=$c rc=$?"; grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per" \
      "$R/ncu_gdn_fused_c$c.txt" | head -8
    grep -E "issue_stalled" "$R/ncu_gdn_fused_c$c.txt" | sort -k3 -n -r | head -5
    pack
  done
else
  echo "no ncu on this machine"
fi
left 150 && timeout 150 python bench/gdn_kernels.py --sweep-decode --bvs 128 > "$R/gdn_sweep_bv128.txt" 2>&1
echo "== sweep rc=$?"; tail -4 "$R/gdn_sweep_bv128.txt"; pack
