#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache with .kcache/tiles/): the 35B-A3B's dense one-row tiles the
# staged sweep found (.kcache/tiles/dense35.json, GDN in and out projections) in the decode graph against the packaged
# ones, each with the experts' tiles as packaged, alternated twice (one and eight lanes); then the experts' tiles at
# four tokens (a one-lane MTP verification: 36 pairs, which take the eight-token tiles today) swept. Lands in
# $OUT/gpu_staged_dense_ab.tgz.
set -uo pipefail
PACK=gpu_staged_dense_ab; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
T=$PWD/.kcache/tiles
arm() {  # arm NAME TILES MODEL ARGS...
  local name=$1 tiles=$2; shift 2
  HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "$name" "$PWD" "$@" --quant int4 --depths 1K --prefill ""
}
for round in a b; do
  arm "35b_packaged_$round" "" qwen3.6-35b-a3b --concurrency 1,8
  arm "35b_dense_$round" "$T/dense35.json" qwen3.6-35b-a3b --concurrency 1,8
done
left 250 && arm 35b_mtp_packaged "" qwen3.6-35b-a3b --spec mtp --spec-k 3 --concurrency 1
left 280 && arm 35b_mtp_dense "$T/dense35.json" qwen3.6-35b-a3b --spec mtp --spec-k 3 --concurrency 1
left 330 && { timeout 200 python bench/experts_mma_tiles.py --model 35b --t 4 --splits 1,2 --json "$R/sweep_35b_t4.json" \
  --tuned-out "$R/tuned_35b_t4.json" > "$R/sweep_35b_t4.txt" 2>&1; echo "== sweep t4 rc=$? $((SECONDS - START)) s"
  grep -E "^35b" "$R/sweep_35b_t4.txt"; pack; }
