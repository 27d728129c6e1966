#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): why the routed experts at eight tokens stream their bytes
# slower than the dense kernel streams the same bytes (H100 2026-12-07: a 35B-A3B layer's selected experts as one
# dense GEMV on fragment order 23.9 + 15.5 us, the experts' launches ~57). The dense int4 kernel on the proxy shapes
# (bench/linear_kernels.py PROXY_SHAPES) at the experts' tiles and at its own (rows 32 / 128, warps 2 / 8, no
# split), then the experts kernel itself at eight tokens on the same tiles (bench/experts_mma_tiles.py). Lands in
# $OUT/gpu_experts_gap.tgz.
set -uo pipefail
PACK=gpu_experts_gap; source "$(dirname "$0")/device_common.sh"
timeout 120 python bench/int4_mma_tiles.py --ms 1 --shapes experts_gu_t8,experts_down_t8 --rows 32,128 --warps 2,8 \
  --max-programs 0 \
  --splits 1 > "$R/dense_proxy_tiles.txt" 2>&1
echo "== dense_proxy_tiles rc=$? $((SECONDS - START)) s"; grep -vE "^\s*$" "$R/dense_proxy_tiles.txt" | tail -30; pack
left 200 && timeout 140 python bench/experts_mma_tiles.py --model 35b --t 8 --rows 32,128 --warps 2,8 --splits 1 \
  > "$R/experts_tiles_t8.txt" 2>&1
echo "== experts_tiles_t8 rc=$? $((SECONDS - START)) s"; grep -vE "^\s*$" "$R/experts_tiles_t8.txt" | tail -30; pack
