#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): two forms of the fp8 experts kernel built after the H100 call
# of 2026-12-06 14:08, both off by default until measured: x staged in shared memory (a tile's x_staged,
# linear_fp8_mma.x_stage; the int4 kernels' form, +3.4% one-lane 35B-A3B int4 decode on an H100) and the one-token
# gate_up routing its token (`route_fp8` launch fusion; the int4 one's +4-5.5%). Their GPU tests first (bit for bit
# against x read per group; the route kernel's ids, the gate_up bits, the layer within rounding), then the 35B-A3B's
# one- and eight-token tiles swept with every candidate staged (`--x staged`), then the decode graph alternated:
# the packaged tiles, the staged winners (HINFER_TILES) at one and eight lanes, and the staged winners with the
# route in the gate_up (HINFER_FUSION_ROWS=route_fp8=1) at one lane. What wins: package the staged entries
# (x_staged=True), set FUSIONS' route_fp8 to 1, say so in docs/moe.md. Lands in $OUT/gpu_moe_fp8_staged.tgz.
set -uo pipefail
PACK=gpu_moe_fp8_staged; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_fp8_mma 150 -rf tests/gpu/test_moe_kernels.py -k "fp8_mma or fp8_gate_up_routes" || exit 0
timeout 200 python bench/experts_mma_tiles.py --fmt fp8 --model 35b --t 1 8 --splits 1,2 --max-regs 0,128 --x staged \
  --json "$R/sweep.json" --tuned-out "$R/tuned_staged.json" > "$R/sweep.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep.txt"; pack
[ -s "$R/tuned_staged.json" ] || exit 0
for round in a b; do
  left 470 && BENCH_TIMEOUT=55 bench_as "packaged_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 --concurrency 1,8 \
    --depths 1K --prefill ""
  left 490 && HINFER_TILES="$R/tuned_staged.json" BENCH_TIMEOUT=55 bench_as "staged_$round" "$PWD" qwen3.6-35b-a3b \
    --quant fp8 --concurrency 1,8 --depths 1K --prefill ""
  left 510 && HINFER_TILES="$R/tuned_staged.json" HINFER_FUSION_ROWS=route_fp8=1 BENCH_TIMEOUT=45 \
    bench_as "staged_route_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 --concurrency 1 --depths 1K --prefill ""
done
