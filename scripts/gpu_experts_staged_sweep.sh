#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the int4 experts' one-token tiles swept again with x staged in
# shared memory (each candidate as the decode runs it: HINFER_X_STAGED=one stages direct one-pair blocks). The
# packaged one-token tiles (split 4 at the 35B-A3B gate_up, four 128-groups a program) were swept with x read per
# group, a round trip to L2 per group; staged, fewer and longer programs may win. 35B-A3B first, then the
# 122B-A10B; winners print as TUNED lines (bench/experts_mma_tiles.py), to be checked in the decode graph
# (`hinfer bench ... --concurrency 1`, HINFER_TILES with the tuned-out file against the packaged tiles) before
# they are packaged. Lands in $OUT/gpu_experts_staged_sweep.tgz.
set -uo pipefail
PACK=gpu_experts_staged_sweep; source "$(dirname "$0")/device_common.sh"
for model in 35b 122b; do
  left 300 || break
  timeout 270 python bench/experts_mma_tiles.py --model $model --t 1 --splits 1,2,4 --json "$R/sweep_$model.json" \
    --tuned-out "$R/tuned_$model.json" > "$R/sweep_$model.txt" 2>&1
  echo "== sweep $model rc=$? $((SECONDS - START)) s"; grep -E "^[a-z0-9]+ +(gate_up|down)|^      " "$R/sweep_$model.txt"; pack
done
