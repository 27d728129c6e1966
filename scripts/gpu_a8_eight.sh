#!/usr/bin/env bash
# One device call (about eight minutes, carry .kcache): the int4 x int8 kernel at eight rows with x quantized ahead.
# At 16 rows it beat the packaged bf16 path by 1.2-1.4x at qkv, GDN in_proj and down (2026-12-05 04:08 UTC); at
# eight rows only gate_up and o_proj hold int4_a8 entries, from sweeps run before x could be quantized ahead for the
# others. The sweep at 8 rows over every split (winners into $R/tiles-a8-eight.json), then the 27B int4 at one and
# eight lanes without and with them (2026-12-05: 183.8 / 982.6 tok/s), then the MoE models' lines as packaged.
# Lands in $OUT/gpu_a8_eight.tgz.
set -uo pipefail
PACK=gpu_a8_eight; source "$(dirname "$0")/device_common.sh"
left 200 && { timeout 150 python bench/int4_mma_tiles.py --a8 --a8-all --ms 8 --json "$R/a8_eight.json" \
  --tuned-out "$R/tiles-a8-eight.json" > "$R/a8_eight.txt" 2>&1; echo "== sweep rc=$? $((SECONDS - START)) s"
  grep -E "M=|int4_a8" "$R/a8_eight.txt" | sed -E 's/SkinnyConfig\(block_n=([0-9]+), block_k=128, block_m=([0-9]+), split_k=([0-9]+), num_warps=([0-9]+), num_stages=2, ring=([0-9]+), fma_offset=False, x_ahead=(True|False), max_regs=0, ring_pairs=False\)/(\1,\2,\3,w\4,r\5,\6)/g' | head -20; pack; }
line() {  # line NAME MODEL [ENV=VALUE...]
  local name=$1 model=$2; shift 2
  left 500 && ( [ $# -gt 0 ] && export "$@"; BENCH_TIMEOUT=70 bench_as "$name" "$PWD" "$model" --quant int4 \
    --concurrency 1,8 --depths 1K --prefill "" )
}
line packaged_27b qwen3.6-27b
[ -s "$R/tiles-a8-eight.json" ] && line a8_eight_27b qwen3.6-27b HINFER_TILES="$R/tiles-a8-eight.json"
line int4_35b qwen3.6-35b-a3b
line int4_122b qwen3.5-122b-a10b
# the quantized-weights issue's kernel table (each 27B shape, int4 and fp8, 1 / 8 / 32 rows, torch's int4 and cuBLAS
# fp8 beside ours)
left 420 && { timeout 170 python bench/linear_kernels.py --formats fp8,fp8-mma,fp8-cublas,int4-a8,int4-mma,int4-torch \
  --ms 1,8,32 --prefill-m 0 --json "$R/kernel_table.json" > "$R/kernel_table.txt" 2>&1
  echo "== kernel table rc=$? $((SECONDS - START)) s"; tail -40 "$R/kernel_table.txt" | cut -c1-150; pack; }
