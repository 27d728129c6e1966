#!/usr/bin/env bash
# One device call (carry .kcache): the int4 experts' down launch routing one token again, its weights ahead of its
# PDL wait (the `down_route` launch fusion): its GPU tests, then 35B-A3B and 122B-A10B one-lane decode with it
# against without (HINFER_FUSE_LAUNCHES without down_route), alternated, and with the down tile at loop depth 4
# (three of the 35B-A3B's four groups ahead of the wait). Lands in $OUT/gpu_moe_down_route.tgz.
set -uo pipefail
PACK=gpu_moe_down_route; source "$(dirname "$0")/device_common.sh"
OFF=slot_sum,tail,gate,norm_linear,route
DEPTH4=bench/results/tiles/20261203-moe-down-depth4.json
timeout 150 python -m pytest -q -s tests/gpu/test_moe_kernels.py -m gpu -p no:cacheprovider \
  -k "down_routes or routes_one_token or down_sums" > "$R/test_moe.txt" 2>&1
echo "== moe tests rc=$? $((SECONDS - START)) s"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/test_moe.txt" | tail -4
pack
one() { bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 1 --depths 1K --prefill ""; }
for round in 1 2; do
  left 420 && HINFER_FUSE_LAUNCHES=$OFF one "35b_off_$round" qwen3.6-35b-a3b
  left 420 && one "35b_on_$round" qwen3.6-35b-a3b
done
left 450 && HINFER_TILES=$DEPTH4 one 35b_on_depth4 qwen3.6-35b-a3b
left 450 && HINFER_FUSE_LAUNCHES=$OFF one 122b_off qwen3.5-122b-a10b
left 480 && one 122b_on qwen3.5-122b-a10b
left 480 && HINFER_TILES=$DEPTH4 one 122b_on_depth4 qwen3.5-122b-a10b
# where a 35B-A3B step goes now, PDL on (each kernel's exposed time), at one and eight lanes
for lanes in 1 8; do
  left 520 || break
  timeout 70 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --lanes $lanes --pdl \
    > "$R/profile_35b_c$lanes.txt" 2>&1
  echo "== profile 35b lanes=$lanes rc=$? $((SECONDS - START)) s"; pack
done
