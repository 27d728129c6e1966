#!/usr/bin/env bash
# One device call (about two minutes, carry .kcache): the attention forms measured by the kernel alone at 18:28 UTC,
# end to end. k8v4 decode with its tiles read by words (now packaged): 27B int4 at one and eight lanes x 128K
# (124.4 / 295.3 tok/s without). The 27B int4 prefill of 128K with fp8 KV on the f16 prefill tile
# (bench/results/tiles/prefill-f16-27b.json; the kernel alone 8-9% faster than the packaged tile, 4,822 tok/s).
# Lands in $OUT/gpu_forms_e2e.tgz.
set -uo pipefail
PACK=gpu_forms_e2e; source "$(dirname "$0")/device_common.sh"
BENCH_TIMEOUT=60 bench_as depth_k8v4_words "$PWD" qwen3.6-27b --quant int4 --kv-dtype k8v4 --concurrency 1,8 \
  --depths 128K --prefill ""
( export HINFER_TILES=bench/results/tiles/prefill-f16-27b.json
  BENCH_TIMEOUT=110 bench_as prefill_f16 "$PWD" qwen3.6-27b --quant int4 --kv-dtype fp8 --concurrency 1 --depths "" \
    --prefill 128K --prefill-repeats 1; grep -E "prefill" "$R/prefill_f16.txt" | tail -2 )
