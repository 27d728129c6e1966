#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): x staged in shared memory in the fp8 experts kernel (a tile's
# x_staged, linear_fp8_mma.x_stage; the int4 kernels' form, +3.4% one-lane 35B-A3B int4 decode on an H100). Its GPU
# tests first (bit for bit against x read per group, and the fp8 tensor-core experts against the reference), then
# the 35B-A3B's one- and eight-token tiles swept with every candidate staged (`--x staged`), then the decode graph
# on the staged winners (HINFER_TILES) against the packaged tiles, one and eight lanes, alternated. If staged wins,
# package its entries (x_staged=True) and say so in docs/moe.md. Lands in $OUT/gpu_moe_fp8_staged.tgz.
set -uo pipefail
PACK=gpu_moe_fp8_staged; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_fp8_mma 150 -rf tests/gpu/test_moe_kernels.py -k "fp8_mma" || exit 0
timeout 230 python bench/experts_mma_tiles.py --fmt fp8 --model 35b --t 1 8 --splits 1,2 --max-regs 0,128 --x staged \
  --json "$R/sweep.json" --tuned-out "$R/tuned_staged.json" > "$R/sweep.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep.txt"; pack
[ -s "$R/tuned_staged.json" ] || exit 0
for round in a b; do
  for arm in packaged staged; do
    tiles=""; [ $arm = staged ] && tiles="$R/tuned_staged.json"
    left 500 && HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "${arm}_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 \
      --concurrency 1,8 --depths 1K --prefill ""
  done
done
