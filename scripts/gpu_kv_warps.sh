#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the quantized KV decode kernel on 8 warps. Nsight Compute
# (2026-12-04 20:41 UTC) found it latency-bound at eight lanes x 128K: two 4-warp programs an SM, under one eligible
# warp a scheduler, int4 at 17% of DRAM; its sweeps never tried 8 warps outside verification's many-row tile. sm_90
# (`python -m hinfer.ops.triton.attention_aot --kernel decode --tile 64,8,5`): int4 128 registers (two 8-warp
# programs an SM: twice the warps), k8v4 148, fp8 172, int8 189 (one). GPU tests, then per format the packaged
# tile against its forms on 8 warps, stages 3-5, 1-4 programs an SM (`--warps 8`; each key's winner into
# $R/tiles-FMT.json), then the 27B at one and eight lanes x 128K on the winners of int4 and k8v4 (packaged, 2026-12-04:
# int4 127.8 / 315.4, k8v4 133.1 / 347.4 tok/s). Lands in $OUT/gpu_kv_warps.tgz.
set -uo pipefail
PACK=gpu_kv_warps; source "$(dirname "$0")/device_common.sh"
gpu_tests test_w8 150 tests/gpu/test_norm_attention_kernels.py -k "eight_warps" || exit 0
for kv in int4 k8v4 fp8 int8; do
  left 330 || break
  timeout 100 python bench/attention_kernels.py --only decode --kv-dtype $kv --warps 8 --decode-case 1,131072,1 \
    --decode-case 8,131072,1 --decode-case 8,32768,4 --json "$R/dec_w8_$kv.json" --tuned-out "$R/tiles-$kv.json" \
    > "$R/dec_w8_$kv.txt" 2>&1
  echo "== kernels $kv rc=$? $((SECONDS - START)) s"; grep -E "\*|tile per key|attention_decode" "$R/dec_w8_$kv.txt" | head -12
  pack
done
for kv in int4 k8v4; do
  left 470 || break
  [ -s "$R/tiles-$kv.json" ] || continue
  BENCH_TIMEOUT=60 HINFER_TILES="$R/tiles-$kv.json" bench_as "depth_w8_$kv" "$PWD" qwen3.6-27b --quant int4 \
    --kv-dtype $kv --concurrency 1,8 --depths 128K --prefill ""
done
