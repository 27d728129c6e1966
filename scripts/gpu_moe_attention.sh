#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): the decode attention tiles at the MoE models' heads, which
# have none swept (35B-A3B 16 query heads over 2 KV heads, 122B-A10B 32 over 2; head_dim 256). The tile sweep with
# bf16 and fp8 KV per model (one lane x 128K, eight x 128K and 32K, 64 x 1K, eight x 4 tokens at 32K), each key's
# winner into one HINFER_TILES file, then each model's int4 decode at one and eight lanes x 128K with fp8 KV on the
# packaged tiles and on the winners. Lands in $OUT/gpu_moe_attention.tgz.
set -uo pipefail
PACK=gpu_moe_attention; source "$(dirname "$0")/device_common.sh"
for heads in 16,2 32,2; do
  for kv in ${KVS:-fp8 bf16}; do
    left 200 || break
    timeout 60 python bench/attention_kernels.py --only decode --sweep decode --kv-dtype $kv --heads $heads ${F16:+--f16} \
      --json "$R/attn_moe_${heads/,/x}_$kv.json" --tuned-out "$R/moe_attn_tiles.json" \
      > "$R/attn_moe_${heads/,/x}_$kv.txt" 2>&1
    echo "== sweep heads $heads $kv rc=$? $((SECONDS - START)) s"; grep -A3 "tile per key" "$R/attn_moe_${heads/,/x}_$kv.txt"
    pack
  done
done
depth() {  # depth NAME MODEL [TILES]: int4 decode at 128K with fp8 KV, one and eight lanes
  ( [ -n "${3:-}" ] && export HINFER_TILES="$3"
    BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$2" --quant int4 --kv-dtype fp8 --concurrency 1,8 --depths 128K \
      --prefill "" )
}
for model in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  [ -z "${SKIP_PLAIN:-}" ] && left 420 && depth "depth_${model}" $model
  left 480 && [ -s "$R/moe_attn_tiles.json" ] && depth "depth_${model}_swept" $model "$R/moe_attn_tiles.json"
done
pack
