#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): probes of where a one-lane decode step's time between its
# GEMVs goes. First the next GEMV's weights pulled into L2 by a latency-bound kernel before it (bench/l2_prefetch.py:
# a busy kernel spinning 0 / 3 / 7 us, prefetching by lines or bulk copies or not, then the engine's int4 GEMV at the
# 27B and 35B-A3B shapes); then what a kernel boundary costs on a chain of 32 square bf16 GEMVs
# (bench/launch_boundary.py: a launch a GEMV with and without programmatic dependent launch, the engine's bf16 GEMV,
# one persistent launch with a grid barrier between GEMVs, and without it), each arm checked against torch's chain
# before it is timed; a MoE layer's experts as one dense GEMV (bench/linear_kernels.py PROXY_SHAPES); then GPU
# test files while time is left. Lands in $OUT/gpu_step_probes.tgz.
set -uo pipefail
PACK=gpu_step_probes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 200 python bench/l2_prefetch.py --shapes o_proj,gdn_in,down,gate_up,in_proj_35b,out_proj_35b \
  --json "$R/l2_prefetch.json" > "$R/l2_prefetch.txt" 2>&1
echo "== l2_prefetch rc=$? $((SECONDS - START)) s"; grep -E "GEMV alone|pair|copy" "$R/l2_prefetch.txt" | head -80; pack
left 300 && timeout 200 python bench/launch_boundary.py --json "$R/launch_boundary.json" > "$R/launch_boundary.txt" 2>&1
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
