#!/usr/bin/env bash
# One device call: the MoE router in the residual-add + RMSNorm launch (`norm_linear`) at 8 lanes as well as 1
# (each lane count against the fusions the default takes there, so only the router differs), the int4 35B-A3B,
# 122B-A10B and 27B step profiles with it, and the 27B int4 MTP rounds (K = 3) with and without a 32K draft
# vocabulary. Everything lands in $OUT/gpu_router_rows.tgz.
set -uo pipefail
PACK=gpu_router_rows; source "$(dirname "$0")/device_common.sh"
run() {  # run NAME FUSE MODEL [ARGS...]
  local name=$1 fuse=$2; shift 2
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$@" --quant int4 --depths 1K --prefill "" \
    --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt" | sed 's/.*decode/decode/')"
}
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 200 && run "$1_c8_default" gate "$2" --concurrency 8
  left 220 && run "$1_c8_router" gate,norm_linear "$2" --concurrency 8
  left 240 && run "$1_c1_default" slot_sum,tail,gate "$2" --concurrency 1
  left 260 && run "$1_c1_router" slot_sum,tail,gate,norm_linear "$2" --concurrency 1
  pack
done
for m in qwen3.6-35b-a3b qwen3.6-27b; do
  left 340 || break
  HINFER_FUSE_LAUNCHES=slot_sum,tail,gate,norm_linear timeout 60 python bench/profile_decode.py --config $m \
    --quant int4 --lanes 1 > "$R/profile_${m}_c1.txt" 2>&1
  echo "== profile $m rc=$?"; head -30 "$R/profile_${m}_c1.txt" | cut -c1-160
  pack
done
for v in "" 32768; do
  left 470 || break
  timeout 60 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 ${v:+--spec-draft-vocab $v} --out "$R" > "$R/spec_vocab${v:-full}.txt" 2>&1
  echo "== MTP K=3 draft vocab ${v:-full} rc=$?"; grep -E "spec K=|decode C=" "$R/spec_vocab${v:-full}.txt"
  pack
done
