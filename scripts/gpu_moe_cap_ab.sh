#!/usr/bin/env bash
# One device call: the MoE models' int4 decode with the packaged experts tiles (one token's held to 128 registers)
# against the same tiles uncapped (an HINFER_TILES file), alternated; the 122B-A10B also with HINFER_INT4_DECODE=bf16
# (its dense projections' int4_a8 entries off). Lands in $OUT/gpu_moe_cap_ab.tgz.
set -uo pipefail
PACK=gpu_moe_cap_ab; source "$(dirname "$0")/device_common.sh"
UNCAPPED=${UNCAPPED:-bench/results/tiles/20261203-moe-int4-mma-16pairs-uncapped.json}
left 300 && HINFER_TILES="$UNCAPPED" decode_bench 35b_uncapped qwen3.6-35b-a3b
left 300 && decode_bench 35b_capped qwen3.6-35b-a3b
left 300 && HINFER_TILES="$UNCAPPED" decode_bench 122b_uncapped qwen3.5-122b-a10b
left 300 && decode_bench 122b_capped qwen3.5-122b-a10b
left 300 && HINFER_INT4_DECODE=bf16 decode_bench 122b_capped_bf16 qwen3.5-122b-a10b
