#!/usr/bin/env bash
# One device call (about three minutes): Nsight Compute on the 35B-A3B's routed experts at eight tokens beside the
# dense int4 kernel streaming the same bytes as one matrix (bench/linear_kernels.py PROXY_SHAPES), which is 1.4x
# faster tile for tile; x staged and group-major scales did not close it (bench/RESULTS.md, 2026-12-07 14:30):
# where the experts' programs wait that the dense ones do not. `BUDGET` seconds (default 240) bound the call.
# Lands in $OUT/gpu_ncu_experts_proxy.tgz.
set -uo pipefail
PACK=gpu_ncu_experts_proxy; source "$(dirname "$0")/device_common.sh"
B=${BUDGET:-240}
ncu_run experts_gu_t8_packaged int4_mma_experts_kernel 70 bench/experts_mma_ncu.py --model 35b --proj gate_up --t 8
left $((B - 60)) && ncu_run dense_gu_default int4_mma_kernel 60 bench/int4_mma_ncu.py --shape experts_gu_t8 --m 1
left $((B - 60)) && ncu_run experts_gu_t8_128x8 int4_mma_experts_kernel 60 bench/experts_mma_ncu.py --model 35b \
  --proj gate_up --t 8 --tile 128,1,8,4
left $((B - 50)) && ncu_run experts_gu_t8_stripes int4_mma_experts_kernel 50 bench/experts_mma_ncu.py --model 35b \
  --proj gate_up --t 8 --layout stripes
left $((B - 50)) && ncu_run dense_gu_rows int4_mma_kernel 50 bench/int4_mma_ncu.py --shape experts_gu_t8 --m 1 --rows
left $((B - 50)) && ncu_run experts_down_t8_packaged int4_mma_experts_kernel 50 bench/experts_mma_ncu.py --model 35b \
  --proj down --t 8
