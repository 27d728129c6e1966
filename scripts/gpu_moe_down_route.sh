#!/usr/bin/env bash
# One device call (carry .kcache): the int4 experts' down launch routing one token again, its weights ahead of its
# PDL wait (the `down_route` launch fusion), and one block per (token, expert) pair at eight lanes
# (HINFER_MOE_DIRECT_PAIRS): their GPU tests; 35B-A3B one-lane decode with down_route against without
# (HINFER_FUSE_LAUNCHES without it), alternated; eight lanes with direct blocks against the grouped ones; where a
# 35B-A3B step goes now (PDL on); the 122B-A10B's pair and the down tile at loop depth 4 as time allows.
# Lands in $OUT/gpu_moe_down_route.tgz.
set -uo pipefail
PACK=gpu_moe_down_route; source "$(dirname "$0")/device_common.sh"
OFF=slot_sum,tail,gate,norm_linear,route
DEPTH4=bench/results/tiles/20261203-moe-down-depth4.json
timeout 170 python -m pytest -q -s tests/gpu/test_moe_kernels.py -m gpu -p no:cacheprovider \
  -k "down_routes or routes_one_token or int4_real_shapes" > "$R/test_moe.txt" 2>&1
echo "== moe tests rc=$? $((SECONDS - START)) s"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/test_moe.txt" | tail -6
pack
one() { bench_as "$1" "$PWD" "$2" --quant int4 --concurrency "$3" --depths 1K --prefill ""; }
for round in 1 2; do
  left 400 && HINFER_FUSE_LAUNCHES=$OFF one "35b_off_$round" qwen3.6-35b-a3b 1
  left 400 && one "35b_on_$round" qwen3.6-35b-a3b 1
done
left 420 && one 35b_c8_grouped qwen3.6-35b-a3b 8
left 420 && HINFER_MOE_DIRECT_PAIRS=72 one 35b_c8_direct qwen3.6-35b-a3b 8
# where a 35B-A3B step goes now, PDL on (each kernel's exposed time), at one and eight lanes
for lanes in 1 8; do
  left 470 || break
  timeout 60 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --lanes $lanes --pdl \
    > "$R/profile_35b_c$lanes.txt" 2>&1
  echo "== profile 35b lanes=$lanes rc=$? $((SECONDS - START)) s"; pack
done
left 480 && HINFER_TILES=$DEPTH4 one 35b_on_depth4 qwen3.6-35b-a3b 1
left 480 && HINFER_FUSE_LAUNCHES=$OFF one 122b_off qwen3.5-122b-a10b 1
left 500 && one 122b_on qwen3.5-122b-a10b 1
