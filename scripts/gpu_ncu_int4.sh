#!/usr/bin/env bash
# One device call (about six minutes): Nsight Compute on the int4 tensor-core kernel at the 35B-A3B's one-row
# projections (small matrices, far from their bytes' time) and the 27B's gate_up at 1 and 8 rows, packaged tiles:
# where it stalls (scheduler and warp-state statistics, occupancy, L1 / L2 traffic), to choose the next change to
# the kernel; then the 35B-A3B's routed experts' gate_up and down at eight and one tokens the same way, at eight
# also on a words ring beside the packaged register look-ahead.
# The reports land in $OUT/ncu_int4.tgz.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT/r"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
command -v ncu > /dev/null || { echo "no ncu on this machine"; exit 1; }
# the stall reasons per issued instruction as well (the sections print only their sum)
SECTIONS="--launch-skip 2 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
NCU="ncu --kernel-name int4_mma_kernel $SECTIONS"
# MODEL SHAPE M [TILE]: the 35B-A3B's one-row projections take 8-9 us a launch in the decode graph for 1-3 us of
# bytes (bench/RESULTS.md), the 27B's gate_up is the largest
for spec in "35b gdn_in 1" "35b o_proj 1" "35b gdn_out 1" "27b gate_up 1" "27b gate_up 8"; do
  [ $SECONDS -lt 200 ] || break  # leave the experts their share of the call
  set -- $spec
  name="ncu_int4_$1_$2_m$3${4:+_$4}"
  cfg=""; [ "$1" = 35b ] && cfg="--config qwen3.6-35b-a3b"
  timeout 60 $NCU python bench/int4_mma_ncu.py $cfg --shape "$2" --m "$3" ${4:+--tile $4} > "$OUT/r/$name.txt" 2>&1
  echo "== $spec rc=$?"; grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per" \
    "$OUT/r/$name.txt" | head -8
  grep -E "issue_stalled" "$OUT/r/$name.txt" | sort -k3 -n -r | head -5
  tar czf "$OUT/ncu_int4.tgz" -C "$OUT/r" .
done
# MODEL PROJ TOKENS [TILE]: the packaged tiles, then at eight tokens the best words ring (20% slower in the sweep)
for spec in "35b gate_up 8" "35b gate_up 8 64,1,2,4,4" "35b down 8" "35b down 8 32,1,2,4,4" "35b gate_up 1" \
    "35b down 1"; do
  [ $SECONDS -lt 420 ] || break
  set -- $spec
  name="ncu_experts_$1_$2_t$3${4:+_${4//,/-}}"
  timeout 60 ncu --kernel-name int4_mma_experts_kernel $SECTIONS python bench/experts_mma_ncu.py --model "$1" \
    --proj "$2" --t "$3" ${4:+--tile $4} > "$OUT/r/$name.txt" 2>&1
  echo "== experts $spec rc=$?"; grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per" \
    "$OUT/r/$name.txt" | head -8
  grep -E "issue_stalled" "$OUT/r/$name.txt" | sort -k3 -n -r | head -5
  tar czf "$OUT/ncu_int4.tgz" -C "$OUT/r" .
done
