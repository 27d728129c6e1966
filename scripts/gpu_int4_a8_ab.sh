#!/usr/bin/env bash
# One device call: int4 decode with the int4 x int8 kernel where tuned.py's int4_a8 entries say (the default)
# against HINFER_INT4_DECODE=bf16, alternated, on the 27B; the same with its 8-row qkv / GDN in_proj tiles added
# (A8_EXTRA, an HINFER_TILES file; they replace the warpgroup kernel there); then the MoE models' dense projections
# with HINFER_INT4_DECODE=a8 (the bf16 kernel's tiles) against bf16. Lands in $OUT/gpu_int4_a8_ab.tgz.
set -uo pipefail
PACK=gpu_int4_a8_ab; source "$(dirname "$0")/device_common.sh"
A8_EXTRA=${A8_EXTRA:-bench/results/tiles/20261203-int4-a8-27b-qkv-gdn-8rows.json}
left 400 && HINFER_INT4_DECODE=bf16 decode_bench 27b_bf16 qwen3.6-27b
left 400 && decode_bench 27b_tuned qwen3.6-27b
left 400 && HINFER_TILES="$A8_EXTRA" decode_bench 27b_tuned_extra qwen3.6-27b
left 400 && HINFER_INT4_DECODE=bf16 decode_bench 27b_bf16_2 qwen3.6-27b
left 400 && decode_bench 27b_tuned_2 qwen3.6-27b
for m in 35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b; do
  name=${m%%:*} model=${m#*:}
  left 480 && HINFER_INT4_DECODE=bf16 decode_bench "${name}_bf16" "$model"
  left 480 && HINFER_INT4_DECODE=a8 decode_bench "${name}_a8" "$model"
done
