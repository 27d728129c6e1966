#!/usr/bin/env bash
# One device call: the MLP's SiLU-mul inside the down projection's int8 quantization of x (2-4 rows, x ahead):
# its GPU test, then the 27B int4 plain decode at 1, 2, 4 and 8 lanes and the MTP round at K = 3 (one lane) of
# this tree against the tree before it (AB_OLD: that tree's hinfer package carried under .kcache), alternated.
# Lands in $OUT/gpu_silu_ab.tgz.
set -uo pipefail
PACK=gpu_silu_ab; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 150 python -m pytest -q -s tests/gpu/test_int4_a8.py -m gpu -p no:cacheprovider > "$R/test_int4_a8.txt" 2>&1
echo "== test_int4_a8 rc=$? $((SECONDS - START)) s: $(tail -1 "$R/test_int4_a8.txt")"
pack
ROWS=(qwen3.6-27b --quant int4 --concurrency 1,2,4,8 --depths 1K --prefill "")
SPEC=(qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1 --depths 1K --prefill "" --steps 64)
BENCH_TIMEOUT=150 bench_as before_1 "$AB_OLD:$PWD" "${ROWS[@]}"
BENCH_TIMEOUT=150 bench_as silu_1 "$PWD" "${ROWS[@]}"
left 400 && bench_as spec_before_1 "$AB_OLD:$PWD" "${SPEC[@]}"
left 420 && bench_as spec_silu_1 "$PWD" "${SPEC[@]}"
left 440 && bench_as before_2 "$AB_OLD:$PWD" "${ROWS[@]}"
left 460 && bench_as silu_2 "$PWD" "${ROWS[@]}"
