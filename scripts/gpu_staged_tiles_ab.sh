#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache with .kcache/tiles/moe35_t1_staged.json): the 35B-A3B's
# one-token experts gate_up on the tile the staged sweep found (64 columns, 4 warps, split 4: 8.88 against 11.23 us
# alone on an H100) against the packaged one in the decode graph, alternated twice (one and eight lanes); then the
# 122B-A10B's one-token experts tiles swept with x staged; then the int4 one-row kernels A/B on the 27B
# (HINFER_INT4_DECODE=tuned against bf16, x staged). Lands in $OUT/gpu_staged_tiles_ab.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_ab; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
TILES=$PWD/.kcache/tiles/moe35_t1_staged.json
for round in a b; do
  BENCH_TIMEOUT=60 bench_as "35b_packaged_$round" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill ""
  HINFER_TILES=$TILES BENCH_TIMEOUT=60 bench_as "35b_tuned_$round" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 1,8 \
    --depths 1K --prefill ""
done
left 250 && HINFER_TILES=$TILES BENCH_TIMEOUT=90 bench_as 35b_tuned_mtp "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp \
  --spec-k 3 --concurrency 1 --depths 1K --prefill ""
left 300 && { timeout 200 python bench/experts_mma_tiles.py --model 122b --t 1 --splits 1,2,4,8 --json "$R/sweep_122b.json" \
  > "$R/sweep_122b.txt" 2>&1; echo "== sweep 122b rc=$? $((SECONDS - START)) s"; grep -E "^122b" "$R/sweep_122b.txt"; pack; }
for mode in tuned bf16; do
  left 480 && HINFER_INT4_DECODE=$mode BENCH_TIMEOUT=50 bench_as "27b_$mode" "$PWD" qwen3.6-27b --quant int4 --concurrency 1 \
    --depths 1K --prefill "" --steps 128
done
