#!/usr/bin/env bash
# One device call: Nsight Compute on the int4 tensor-core kernel (gate_up, down and o_proj, 27B shapes) at M = 1,
# 8 and 32 (decode, 8 lanes, MTP verification of 8 lanes x 4 rows: 32 rows cost ~3x 8 rows for the same weight
# bytes) with the packaged tiles and the register look-ahead twin of the ring tile: where it stalls (scheduler and
# warp-state statistics, occupancy, L1 / L2 traffic: every warp loads all of x per group), to choose the next
# change to the kernel; then the routed experts' gate_up and down at one token (35B-A3B, 122B-A10B) the same way.
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
for spec in "gate_up 1" "gate_up 1 128,8,2,4,2" "gate_up 8" "gate_up 32" "down 8" "down 32" "o_proj 1"; do
  [ $SECONDS -lt 420 ] || break  # leave the experts their share of the call
  set -- $spec
  name="ncu_int4_$1_m$2${3:+_$3}"
  timeout 100 $NCU python bench/int4_mma_ncu.py --shape "$1" --m "$2" ${3:+--tile $3} > "$OUT/r/$name.txt" 2>&1
  echo "== $spec rc=$?"; grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per" \
    "$OUT/r/$name.txt" | head -8
  grep -E "issue_stalled" "$OUT/r/$name.txt" | sort -k3 -n -r | head -5
  tar czf "$OUT/ncu_int4.tgz" -C "$OUT/r" .
done
for spec in "35b gate_up" "35b down" "122b gate_up" "122b down"; do
  [ $SECONDS -lt 540 ] || break
  set -- $spec
  name="ncu_experts_$1_$2_t1"
  timeout 100 ncu --kernel-name int4_mma_experts_kernel $SECTIONS python bench/experts_mma_ncu.py --model "$1" \
    --proj "$2" > "$OUT/r/$name.txt" 2>&1
  echo "== experts $spec rc=$?"; grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per" \
    "$OUT/r/$name.txt" | head -8
  grep -E "issue_stalled" "$OUT/r/$name.txt" | sort -k3 -n -r | head -5
  tar czf "$OUT/ncu_int4.tgz" -C "$OUT/r" .
done
