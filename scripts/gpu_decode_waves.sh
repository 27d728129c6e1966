#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the decode attention kernel with its split count filling
# whole waves (attention_decode.decode_splits: eight lanes x 4 KV heads now 12 splits, one wave of 396 programs,
# where the rule before took 13, 416 programs) and its tiles keyed by KV format. Per format the tile sweep (BLOCK_N
# 32 / 64, stages 3-5, programs an SM 2 / 3 / 4 / 8) with the default tile also at 13 and 33 splits, each key's
# winner into one HINFER_TILES file; then 27B int4 decode at 128K, one and eight lanes, fp8 and k8v4 KV on the
# packaged tiles with the new rule and on the winners, against 2026-12-04's 137.4 / 315.3 and 121.3 / 222.4 tok/s.
# Lands in $OUT/gpu_decode_waves.tgz.
set -uo pipefail
PACK=gpu_decode_waves; source "$(dirname "$0")/device_common.sh"
sweep() {
  timeout 60 python bench/attention_kernels.py --only decode --sweep decode --kv-dtype "$1" --splits 13,33 \
    --json "$R/attn_waves_$1.json" --tuned-out "$R/decode_tiles.json" > "$R/attn_waves_$1.txt" 2>&1
  echo "== decode sweep $1 rc=$? $((SECONDS - START)) s"
  grep -E "\*|fixed" "$R/attn_waves_$1.txt" | grep -E "B=8 ctx=128K|B=1 ctx" ; grep -A3 "tile per key" "$R/attn_waves_$1.txt"
  pack
}
depth() {  # depth NAME KV [TILES]: 27B int4 decode at 128K, one and eight lanes (on TILES' tiles when given)
  ( [ -n "${3:-}" ] && export HINFER_TILES="$3"
    BENCH_TIMEOUT=95 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype "$2" --concurrency 1,8 --depths 128K \
      --prefill "" )
}
for kv in fp8 k8v4 bf16; do left 200 && sweep $kv; done
left 300 && depth depth_fp8 fp8
left 330 && [ -s "$R/decode_tiles.json" ] && depth depth_fp8_swept fp8 "$R/decode_tiles.json"
left 390 && depth depth_k8v4 k8v4
left 420 && [ -s "$R/decode_tiles.json" ] && depth depth_k8v4_swept k8v4 "$R/decode_tiles.json"
for kv in int8 int4; do left 470 && sweep $kv; done
pack
