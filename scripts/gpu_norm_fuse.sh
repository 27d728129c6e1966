#!/usr/bin/env bash
# One device call: the MLP's add + RMSNorm inside the gate_up projection's int8 quantization of x (the int4 x int8
# kernel's prologue at one row, the launch ahead at 2-8 rows): its GPU tests and the quantized-model tests, then
# the 27B int4 decode at 1, 2, 4 and 8 lanes and the MTP round at one lane of this tree against the tree before it
# (AB_OLD: that tree's package under .kcache), alternated. Lands in $OUT/gpu_norm_fuse.tgz.
set -uo pipefail
PACK=gpu_norm_fuse; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
t() {  # NAME FILE -k EXPR: a GPU test file's selection
  local name=$1 file=$2; shift 2
  timeout "${TEST_TIMEOUT:-150}" python -m pytest -q -s "$file" -m gpu -p no:cacheprovider "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s: $(grep -E '(passed|failed|error)' "$R/$name.txt" | tail -1)"
  grep -E "^(FAILED|ERROR)|Error:|assert " "$R/$name.txt" | head -6
  pack
}
t test_a8_norm tests/gpu/test_int4_a8.py -k "norm or silu_mul"
TEST_TIMEOUT=200 t test_engine tests/gpu/test_engine_gpu.py -k "quantized_layers or spec_graphs_greedy or 27b_layers"
ROWS=(qwen3.6-27b --quant int4 --concurrency 1,2,4,8 --depths 1K --prefill "")
SPEC=(qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1 --depths 1K --prefill "" --steps 64)
left 330 && bench_as before_1 "$AB_OLD:$PWD" "${ROWS[@]}"
left 360 && bench_as norm_1 "$PWD" "${ROWS[@]}"
left 390 && bench_as spec_before "$AB_OLD:$PWD" "${SPEC[@]}"
left 420 && bench_as spec_norm "$PWD" "${SPEC[@]}"
left 450 && bench_as before_2 "$AB_OLD:$PWD" "${ROWS[@]}"
left 480 && bench_as norm_2 "$PWD" "${ROWS[@]}"
