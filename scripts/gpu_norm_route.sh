#!/usr/bin/env bash
# One device call: the MoE route in the residual-add + norm + router launch (`norm_route`: the last of a token's
# programs routes it, one launch fewer per MoE layer). The GPU tests at the real shapes, then int4 35B-A3B and
# 122B-A10B at 1 and 8 lanes each way (each lane count against the fusions its default takes, so only the route
# differs), and the 35B-A3B one-lane profile with it. Everything lands in $OUT/gpu_norm_route.tgz.
set -uo pipefail
PACK=gpu_norm_route; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  -k "route_in_the_norm_launch or router_in_the_norm_launch" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head; pack
run() {  # run NAME FUSE MODEL [ARGS...]
  local name=$1 fuse=$2; shift 2
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$@" --quant int4 --depths 1K --prefill "" \
    --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt" | sed 's/.*decode/decode/')"
}
for i in 1 2; do
  for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
    set -- $m
    [ "$1" = 122b ] && [ $i = 2 ] && continue
    left 260 && run "$1_c1_norm_linear_$i" slot_sum,tail,gate,norm_linear "$2" --concurrency 1
    left 280 && run "$1_c1_norm_route_$i" slot_sum,tail,gate,norm_linear,norm_route "$2" --concurrency 1
    left 300 && run "$1_c8_norm_linear_$i" gate,norm_linear "$2" --concurrency 8
    left 320 && run "$1_c8_norm_route_$i" gate,norm_linear,norm_route "$2" --concurrency 8
    pack
  done
done
if left 380; then
  HINFER_FUSE_LAUNCHES=slot_sum,tail,gate,norm_linear,norm_route timeout 60 python bench/profile_decode.py \
    --config qwen3.6-35b-a3b --quant int4 --lanes 1 > "$R/profile_35b_c1_norm_route.txt" 2>&1
  echo "== profile rc=$?"; head -16 "$R/profile_35b_c1_norm_route.txt" | grep -v Warn | cut -c1-120
  pack
fi
