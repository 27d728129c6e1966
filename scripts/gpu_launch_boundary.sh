#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): what a kernel boundary costs, on a chain of 32 square bf16
# GEMVs (bench/launch_boundary.py): one launch a GEMV with and without programmatic dependent launch, the engine's
# bf16 GEMV, and one persistent launch walking the chain with a grid barrier between GEMVs (and its weights'
# first block ahead of the barrier; and no barrier, the streaming bound), at D = 1K-5K, each arm checked against
# torch's chain before it is timed; a MoE layer's experts as one dense GEMV (bench/linear_kernels.py PROXY_SHAPES);
# then GPU test files while time is left. Lands in $OUT/gpu_launch_boundary.tgz.
set -uo pipefail
PACK=gpu_launch_boundary; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 400 python bench/launch_boundary.py --json "$R/launch_boundary.json" > "$R/launch_boundary.txt" 2>&1
echo "== launch_boundary rc=$? $((SECONDS - START)) s"; grep -E "D=|copy" "$R/launch_boundary.txt"; pack
# a 35B-A3B MoE layer's experts as one dense GEMV of one x row (bench/linear_kernels.py PROXY_SHAPES): how fast the
# dense kernels stream the bytes the experts' launches read at one and eight tokens (the rows layout's bf16 loop the
# experts run, fragment order, int4 x int8)
left 360 && timeout 120 python bench/linear_kernels.py --formats int4-rows-mma,int4-mma,int4-a8,int4-a8-ahead --ms 1 \
  --prefill-m 0 --shapes experts_gu_t1,experts_down_t1,experts_gu_t8,experts_down_t8 --json "$R/experts_proxy.json" \
  > "$R/experts_proxy.txt" 2>&1
echo "== experts_proxy rc=$? $((SECONDS - START)) s"; tail -8 "$R/experts_proxy.txt"; pack
# then the GPU test files not run whole on the landed tree lately, while time is left
left 300 && gpu_tests int4_wgmma 150 tests/gpu/test_int4_wgmma.py
left 420 && gpu_tests linear_kernels 120 tests/gpu/test_linear_kernels.py
