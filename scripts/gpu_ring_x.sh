#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache; the experts kernel's source changed, so its launches compile
# cold): the int4 experts with x copied into the words ring and the program's scales read once into shared memory
# (the tile's ring_x). Its GPU test against the register look-ahead (bit for bit, one / eight / 32 tokens, both
# MoE shapes), the 35B-A3B's eight-token tiles alone, ring and ring_x side by side with the packaged tile first
# (`bench/experts_mma_tiles.py --t 8 --rings 4,6,8 --ring-x --rows 32,64,128 --warps 2,4`), then the sweep's
# winners in the decode graph at eight lanes against the packaged tiles, alternated, while time is left
# (`hinfer bench qwen3.6-35b-a3b --quant int4 --concurrency 8 --depths 1K --prefill ""`). Lands in
# $OUT/gpu_ring_x.tgz. LIMIT (default 590): the call's seconds, which the steps' guards leave room within.
set -uo pipefail
PACK=gpu_ring_x; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_ring 200 tests/gpu/test_moe_kernels.py -k "words_ring" || exit 0
L=${LIMIT:-590}
left $((L - 260)) && timeout 220 python bench/experts_mma_tiles.py --model 35b --t 8 --splits 1 --rings 4,6,8 --ring-x \
  --rows 32,64,128 --warps 2,4 --json "$R/sweep_35b_t8.json" --tuned-out "$R/tuned_35b_rx.json" \
  > "$R/sweep_35b_t8.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "default|^      " "$R/sweep_35b_t8.txt" | head -12; pack
arm() {  # arm NAME TILES MODEL
  HINFER_TILES="$2" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$3" --quant int4 --concurrency 8 --depths 1K --prefill ""
}
for round in a b; do
  [ -f "$R/tuned_35b_rx.json" ] || break
  left $((L - 120)) && arm "35b_packaged_$round" "" qwen3.6-35b-a3b
  left $((L - 60)) && arm "35b_rx_$round" "$R/tuned_35b_rx.json" qwen3.6-35b-a3b
done
