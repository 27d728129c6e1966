#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the projections after a latency-bound kernel with their whole
# weight slice issued before the PDL wait (bench/ring_ahead_tiles.py: the packaged tile's ring grown to a program's
# groups + 1). The out projections (after the fused GDN step and decode attention) first, then the in projections
# too (after the norm's launch); checked bit for bit against the packaged tiles on the GPU, then each arm in the
# decode graph at LANES lanes (the first argument: 1, default, or 8), alternated: the 27B, the 35B-A3B, then the
# 122B-A10B. A kernel timed alone cannot show this (its predecessor there is its own copy). Lands in
# $OUT/gpu_rings_ahead.tgz.
set -uo pipefail
LANES="${1:-1}"
PACK=gpu_rings_ahead; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
for shapes in out all; do
  timeout 120 python bench/ring_ahead_tiles.py --out "$R/rings_$shapes.json" --shapes $shapes --m "$LANES" --check \
    > "$R/rings_$shapes.txt" 2>&1
  rc=$?; echo "== $shapes tiles and checks rc=$rc $((SECONDS - START)) s"; cat "$R/rings_$shapes.txt"; pack
  [ $rc = 0 ] || exit 0
done
for model in qwen3.6-27b qwen3.6-35b-a3b; do
  for arm in packaged out all packaged out all; do
    left 470 || break
    tiles=""; [ $arm != packaged ] && tiles="$R/rings_$arm.json"
    tiles_arm "${model##*-}_c${LANES}_${arm}_$((SECONDS - START))" "$tiles" $model --concurrency "$LANES"
  done
done
for arm in packaged out all; do
  left 540 || break
  tiles=""; [ $arm != packaged ] && tiles="$R/rings_$arm.json"
  tiles_arm "122b_c${LANES}_${arm}_$((SECONDS - START))" "$tiles" qwen3.5-122b-a10b --concurrency "$LANES"
done
