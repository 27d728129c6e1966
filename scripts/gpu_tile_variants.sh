#!/usr/bin/env bash
# One device call (about five minutes): packaged int4 tiles changed one way at a time, timed in the decode graph
# (bench/tile_variants.py writes one HINFER_TILES file per family and change). By default the MoE models under
# register caps (their dense and experts kernels run 140-180 registers at 4 warps, three programs an SM): the
# 35B-A3B, then the 122B-A10B, each against its packaged tiles. MODELS and VARIANTS override, e.g.
# MODELS="27b:qwen3.6-27b" VARIANTS="ring=3,ring_pairs=1 ring=4,ring_pairs=1", FAMILIES=int4_mma (the dense
# projections only), MAX_M / MIN_M (the M buckets changed). Lands in $OUT/gpu_tile_variants.tgz.
set -uo pipefail
PACK=gpu_tile_variants; source "$(dirname "$0")/device_common.sh"
for m in ${MODELS:-35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b}; do
  name=${m%%:*} model=${m#*:}
  python bench/tile_variants.py --config "$model" --variants ${VARIANTS:-max_regs=128 max_regs=96} \
    ${FAMILIES:+--families "$FAMILIES"} ${MAX_M:+--max-m "$MAX_M"} ${MIN_M:+--min-m "$MIN_M"} --out-dir "$R/tiles" > /dev/null
  left 420 && decode_bench "${name}_packaged" "$model"
  for f in "$R"/tiles/"$model"-*.json; do
    left 420 && HINFER_TILES="$f" decode_bench "${name}_$(basename "$f" .json | sed "s/^$model-//")" "$model"
  done
done
