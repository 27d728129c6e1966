#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache; an H100 serves): the routed experts at one and eight tokens
# with their words in mma fragment order (the decode kernel reads it; bench only, the grouped prefill kernels cannot)
# against the stripes, the default since 2026-12-07, each over one tile grid; the dense kernel streams the same
# bytes in fragment order at 32.2 us where the experts on stripes take 38.5 (Nsight Compute, bench/RESULTS.md
# 2026-12-07 16:44). If fragment order is no faster than the stripes, its form goes from the decode kernel; if it
# is, the stripes' gap to the dense kernel is the layout's. Lands in $OUT/gpu_experts_fragment.tgz.
set -uo pipefail
PACK=gpu_experts_fragment; source "$(dirname "$0")/device_common.sh"
sweep() {  # sweep LAYOUT MODEL
  timeout 140 python bench/experts_mma_tiles.py --model "$2" --t 1 8 --rows 32,64,128 --warps 2,4,8 --splits 1,2,4 \
    --layout "$1" --tuned-out "$R/tiles_$1_$2.json" > "$R/experts_$1_$2.txt" 2>&1
  echo "== experts_$1_$2 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/experts_$1_$2.txt"; pack
}
sweep fragment 35b
left 300 && sweep stripes 35b
left 380 && sweep fragment 122b
left 440 && sweep stripes 122b
