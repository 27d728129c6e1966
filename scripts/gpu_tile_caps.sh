#!/usr/bin/env bash
# One device call (about five minutes): the MoE models' packaged int4 tiles under register caps, timed in the
# decode graph (bench/tile_caps.py writes one HINFER_TILES file per family and cap: the dense projections,
# int4_mma, and the routed experts, moe_int4_mma; their kernels run 140-180 registers at 4 warps, three programs
# an SM): the 35B-A3B, then the 122B-A10B, each against its packaged tiles. Lands in $OUT/gpu_tile_caps.tgz.
set -uo pipefail
PACK=gpu_tile_caps; source "$(dirname "$0")/device_common.sh"
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  python bench/tile_caps.py --config "$2" --caps "${CAPS:-128,96}" --out-dir "$R/caps" > /dev/null
  left 420 && decode_bench "$1_packaged" "$2"
  for f in "$R"/caps/"$2"-*regs.json; do
    left 420 && HINFER_TILES="$f" decode_bench "$1_$(basename "$f" .json | sed "s/^$2-//")" "$2"
  done
done
