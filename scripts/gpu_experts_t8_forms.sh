#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): the routed experts at eight tokens in the forms that set them
# apart from the dense kernel, which streams the same bytes 1.45x faster (H100 2026-12-07 11:43 and 12:10,
# bench/RESULTS.md): x staged in shared memory against read from L2 a group at a time, and the scales and zero
# points group-major against the row layout. First the GPU tests of the kernels whose scale reads changed (the
# experts' strides, the one launch); `bench/experts_mma_tiles.py --model 35b --t 8` per form; then the 35B-A3B at
# eight lanes on the packaged tiles and on the staged sweep's winners (HINFER_TILES). Lands in
# $OUT/gpu_experts_t8_forms.tgz.
set -uo pipefail
PACK=gpu_experts_t8_forms; source "$(dirname "$0")/device_common.sh"
gpu_tests scales_test 120 tests/gpu/test_moe_kernels.py -k "scales_by_their_strides or x_staged or one_launch or words_ring" || exit 0
sweep() {  # sweep NAME ARGS...
  local name=$1; shift
  timeout 60 python bench/experts_mma_tiles.py --model 35b --t 8 --rows 32,128 --warps 2,8 --splits 1 \
    --tuned-out "$R/tiles_$name.json" "$@" > "$R/experts_t8_$name.txt" 2>&1
  echo "== experts_t8_$name rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/experts_t8_$name.txt"; pack
}
sweep per_group --x per-group
sweep staged --x staged
sweep groups --x per-group --scales-layout groups
sweep staged_groups --x staged --scales-layout groups
arm() {  # arm NAME [TILES]
  HINFER_TILES="${2:-}" BENCH_TIMEOUT=40 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 8 --depths 1K \
    --prefill ""
}
left 380 && arm packaged_a
[ -s "$R/tiles_staged.json" ] && left 420 && arm staged_a "$R/tiles_staged.json"
left 460 && arm packaged_b
[ -s "$R/tiles_staged.json" ] && left 500 && arm staged_b "$R/tiles_staged.json"
