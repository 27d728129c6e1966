#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache; an H100 serves): the 35B-A3B's routed experts with their
# words stripe-major. The dense int4 kernel streams a MoE layer's selected bytes 1.56x faster on fragment order
# than on rows (bench/RESULTS.md 2026-12-07 11:43), and x staged or group-major scales did not close the experts'
# gap (14:30). First the experts at eight tokens over one tile grid per word order (the row words stripe by
# stripe, rows); then the 35B-A3B end to end, HINFER_EXPERTS_WORDS=rows against stripes and against stripes for
# the gate_up only (the stripes on their sweep's tiles), alternated, decode at one and eight lanes and an 8K
# prefill (the grouped kernels read the stripes too); then the GPU tests of both kernels on stripes; with what is
# left, mma fragment order's sweep and Nsight Compute.
# Lands in $OUT/gpu_experts_stripes.tgz.
set -uo pipefail
PACK=gpu_experts_stripes; source "$(dirname "$0")/device_common.sh"
sweep() {  # sweep LAYOUT TOKENS
  timeout 90 python bench/experts_mma_tiles.py --model 35b --t "$2" --rows 32,64,128 --warps 2,4,8 --splits 1 \
    --layout "$1" --tuned-out "$R/tiles_$1_t$2.json" > "$R/experts_t$2_$1.txt" 2>&1
  echo "== experts_t$2_$1 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/experts_t$2_$1.txt"; pack
}
sweep stripes 8
sweep rows 8
arm() {  # arm NAME WORDS [TILES]
  HINFER_EXPERTS_WORDS=$2 HINFER_TILES="${3:-}" BENCH_TIMEOUT=90 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 \
    --concurrency 1,8 --depths 1K --prefill 8K
  grep -E "prefill" "$R/$1.txt" | tail -1 | sed -E 's/^.*INFO hinfer.bench: //'
}
tiles="$R/tiles_stripes_t8.json"; [ -s "$tiles" ] || tiles=""
left 250 && arm rows_a rows
left 310 && arm stripes_a stripes "$tiles"
left 370 && arm gate_up_a gate_up
left 430 && arm rows_b rows
left 480 && arm stripes_b stripes "$tiles"
left 500 && gpu_tests stripes_tests $((580 - SECONDS + START)) tests/gpu/test_moe_kernels.py -k "stripe"
left 480 && sweep fragment 8
left 420 && BUDGET=$((560 - SECONDS + START)) bash scripts/gpu_ncu_experts_proxy.sh 2>&1 | grep -v "^$"
cp "$OUT"/gpu_ncu_experts_proxy.tgz "$R"/ 2>/dev/null; pack
