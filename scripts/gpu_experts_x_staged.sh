#!/usr/bin/env bash
# One device call (about two and a half minutes, carry .kcache): the routed experts at eight tokens with each program's x
# staged in shared memory against x read from L2 a group at a time (the packaged eight-token tiles read it per
# group; a dense kernel streaming the same bytes with x staged ran 1.45x faster, H100 2026-12-07 11:43):
# `bench/experts_mma_tiles.py --model 35b --t 8 --x per-group | staged`, then the 35B-A3B at eight lanes on the
# packaged tiles and on the staged sweep's winners (HINFER_TILES). Lands in $OUT/gpu_experts_x_staged.tgz.
set -uo pipefail
PACK=gpu_experts_x_staged; source "$(dirname "$0")/device_common.sh"
for x in per-group staged; do
  timeout 60 python bench/experts_mma_tiles.py --model 35b --t 8 --x $x --rows 32,128 --warps 2,8 --splits 1 \
    --tuned-out "$R/tiles_t8_$x.json" > "$R/experts_t8_$x.txt" 2>&1
  echo "== experts_t8_$x rc=$? $((SECONDS - START)) s"; grep -E "default|^ +[0-9.]+ us" "$R/experts_t8_$x.txt" | head -8; pack
done
arm() {  # arm NAME [TILES]
  HINFER_TILES="${2:-}" BENCH_TIMEOUT=35 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 8 --depths 1K \
    --prefill ""
}
left 100 && arm packaged_a
[ -s "$R/tiles_t8_staged.json" ] && left 125 && arm staged_a "$R/tiles_t8_staged.json"
