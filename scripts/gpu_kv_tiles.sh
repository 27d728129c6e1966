#!/usr/bin/env bash
# One device call (under ten minutes, carry .kcache): the decode attention kernel alone per KV format, default tile
# and the tile sweep (BLOCK_N 16 / 32 / 64, stages 3-5, programs an SM 2 / 4 / 8) at one lane 128K, eight lanes 32K
# and 128K, 64 lanes 1K and eight lanes x 4 verified tokens at 32K, each beside its byte floor: the 27B int4 decode at
# 128K / 256K ran the quantized formats at 23-65% of their floors against bf16's 78-85% (bench/RESULTS.md,
# 2026-12-04), and the decode tiles are keyed on the heads and rows, not the format; Nsight Compute on the fp8 and
# bf16 kernels at eight lanes x 128K first. Lands in $OUT/gpu_kv_tiles.tgz.
set -uo pipefail
PACK=gpu_kv_tiles; source "$(dirname "$0")/device_common.sh"
# first, Nsight Compute on the decode kernel at eight lanes x 128K, fp8 against bf16 (what holds the fp8 one back)
for kv in fp8 bf16; do
  left 200 && ncu_run "ncu_decode_${kv}_b8_128k" _decode_kernel 75 bench/attention_kernels.py --only decode \
    --kv-dtype $kv --decode-case 8,131072,1
done
for kv in fp8 bf16 k8v4 int8 int4; do
  left 470 || break
  timeout 100 python bench/attention_kernels.py --only decode --sweep decode --kv-dtype $kv \
    --json "$R/attn_decode_$kv.json" > "$R/attn_decode_$kv.txt" 2>&1
  echo "== decode sweep $kv rc=$? $((SECONDS - START)) s"; grep -E "\*|best|fastest" "$R/attn_decode_$kv.txt" | head -12
  pack
done
