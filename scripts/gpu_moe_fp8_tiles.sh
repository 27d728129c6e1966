#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the fp8 experts' four- and 32-token buckets swept (`--t 4 32`)
# and the winners (HINFER_TILES) against the packaged tiles in the decode graph, alternated: four lanes of plain
# decode and the one- and eight-lane MTP rounds. The 35B-A3B's buckets are all packaged (2026-12-06 19:18, H100);
# the 122B-A10B at fp8 needs an H200's memory: on one, change `--model 35b` to `--model 122b --t 1 3 4 8 32` and
# the arms' model to qwen3.5-122b-a10b. Lands in $OUT/gpu_moe_fp8_tiles.tgz.
set -uo pipefail
PACK=gpu_moe_fp8_tiles; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
# one K split only (every fp8 winner so far took one): half the kernels to compile, so a cold cache still sweeps both
timeout 240 python bench/experts_mma_tiles.py --fmt fp8 --model 35b --t 4 32 --splits 1 --max-regs 0,128 \
  --json "$R/sweep.json" --tuned-out "$R/tuned.json" > "$R/sweep.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep.txt"; pack
[ -s "$R/tuned.json" ] || exit 0
# the packaged entries stay in both arms (HINFER_TILES adds to the packaged table)
for round in a b; do
  for arm in packaged tuned; do
    tiles=""; [ $arm = tuned ] && tiles="$R/tuned.json"
    left 430 && HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "c4_${arm}_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 \
      --concurrency 4 --depths 1K --prefill ""
    left 470 && HINFER_TILES=$tiles BENCH_TIMEOUT=80 bench_as "mtp_${arm}_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 \
      --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64
  done
done
