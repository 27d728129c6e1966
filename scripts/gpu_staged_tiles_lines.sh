#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the MoE decode lines as they stand (35B-A3B one and eight
# lanes, int4, depth 1K), the 35B-A3B's one-token experts tiles swept with x staged in shared memory (K splits up
# to 8: staged, a split's x costs one load), then the 122B-A10B's line at one and eight lanes (the bench's memory
# plan first: on an 80 GB card its eight lanes either fit or fail with the plan's figures). Lands in
# $OUT/gpu_staged_tiles_lines.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_lines; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
BENCH_TIMEOUT=70 bench_as line_35b "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill ""
timeout 300 python bench/experts_mma_tiles.py --model 35b --t 1 --splits 1,2,4,8 --json "$R/sweep_35b.json" \
  --tuned-out "$R/tuned_35b.json" > "$R/sweep_35b.txt" 2>&1
echo "== sweep 35b rc=$? $((SECONDS - START)) s"; grep -E "^[a-z0-9]+ +(gate_up|down)|TUNED|^      " "$R/sweep_35b.txt" | tail -30
pack
left 440 && BENCH_TIMEOUT=120 bench_as line_122b "$PWD" qwen3.5-122b-a10b --quant int4 --concurrency 1,8 \
  --depths 1K --prefill ""
grep -E "PlanError|plan|GiB|GB" "$R/line_122b.txt" | tail -5
