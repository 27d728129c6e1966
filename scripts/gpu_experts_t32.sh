#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): an eight-lane MTP verification at K = 3 sends 32 tokens (288
# pairs) through the experts, on tiles swept 2026-12-02, before x was read as the decode reads it, the 16-byte words
# and the register caps (the 122B-A10B's down there runs one warp; at four tokens two warps won 28%). Sweep the
# 122B-A10B and the 35B-A3B at 32 tokens with and without the 128-register cap, then the eight-lane round at K = 3
# on the winners against the packaged tiles, alternated. Lands in $OUT/gpu_experts_t32.tgz.
set -uo pipefail
PACK=gpu_experts_t32; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
for m in 122b 35b; do
  timeout 170 python bench/experts_mma_tiles.py --model $m --t 32 --splits 1 --max-regs 0,128 \
    --json "$R/sweep_${m}_t32.json" --tuned-out "$R/tuned_${m}_t32.json" > "$R/sweep_${m}_t32.txt" 2>&1
  echo "== sweep $m t32 rc=$? $((SECONDS - START)) s"; grep -E "^$m " "$R/sweep_${m}_t32.txt"; pack
done
arm() {  # arm NAME TILES MODEL
  HINFER_TILES=$2 BENCH_TIMEOUT=80 bench_as "$1" "$PWD" "$3" --quant int4 --spec mtp --spec-k 3 --concurrency 8 \
    --depths 1K --prefill "" --steps 32
}
tuned_ab t32 122b:qwen3.5-122b-a10b 35b:qwen3.6-35b-a3b
