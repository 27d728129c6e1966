#!/usr/bin/env bash
# One device call: the add + RMSNorm in the launch that quantizes x ahead, now also in front of the layer's input
# projections (attention qkv, GDN in_proj with its tail on the normed rows): its GPU tests; the 27B int4 decode at 1,
# 2 and 4 lanes of this tree against the tree before any norm fusion (AB_OLD, under .kcache); and at one lane with
# x quantized ahead at one row too (bench/results/tiles/...-row1-ahead: gate_up, qkv, GDN in_proj and down, so the
# norms and the SiLU-mul go into those launches); the o_proj at 2 and 4 rows with x in its prologue. Lands in
# $OUT/gpu_norm_ahead.tgz.
set -uo pipefail
PACK=gpu_norm_ahead; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 120 python -m pytest -q -s tests/gpu/test_int4_a8.py -m gpu -k "norm" -p no:cacheprovider > "$R/test_norm.txt" 2>&1
echo "== test norm rc=$? $((SECONDS - START)) s"; grep -E "^(FAILED|ERROR)|Error:|assert " "$R/test_norm.txt" | head -6
pack
ROWS=(qwen3.6-27b --quant int4 --concurrency 1,2,4 --depths 1K --prefill "")
ONE=(qwen3.6-27b --quant int4 --concurrency 1 --depths 1K --prefill "")
BENCH_TIMEOUT=120 bench_as before "$AB_OLD:$PWD" "${ROWS[@]}"
BENCH_TIMEOUT=120 bench_as norm "$PWD" "${ROWS[@]}"
if left 200; then
  export HINFER_TILES=bench/results/tiles/20261203-2110-int4-a8-row1-ahead-27b.json
  bench_as row1_ahead "$PWD" "${ONE[@]}"
  unset HINFER_TILES
fi
if left 225; then  # the o_proj / GDN out_proj at 2 and 4 rows quantizing x in the prologue (no launch ahead)
  export HINFER_TILES=bench/results/tiles/20261203-2115-int4-a8-oproj-prologue-rows2-4-27b.json
  bench_as oproj_prologue "$PWD" qwen3.6-27b --quant int4 --concurrency 2,4 --depths 1K --prefill ""
  unset HINFER_TILES
fi
left 250 && bench_as norm_c1 "$PWD" "${ONE[@]}"
