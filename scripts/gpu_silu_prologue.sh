#!/usr/bin/env bash
# One device call: the MLP's SiLU-mul in the int4 x int8 kernel's prologue (one row: x quantized in each program):
# its GPU test, the 27B int4 decode at 1 and 8 lanes of this tree against the tree before it (AB_OLD: that tree's
# package under .kcache), alternated; then where an MTP round's time goes (bench/spec_timeline.py: events on the
# stream between its parts, the host's clock) at one and eight lanes, and at one lane with the MTP layer in int4.
# Lands in $OUT/gpu_silu_prologue.tgz.
set -uo pipefail
PACK=gpu_silu_prologue; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 150 python -m pytest -q -s tests/gpu/test_int4_a8.py -m gpu -k silu_mul -p no:cacheprovider \
  > "$R/test_silu_mul.txt" 2>&1
echo "== test silu_mul rc=$? $((SECONDS - START)) s: $(grep -cE '^\.|passed' "$R/test_silu_mul.txt") lines"
grep -E "passed|failed|Error|assert" "$R/test_silu_mul.txt" | head -5
pack
ROWS=(qwen3.6-27b --quant int4 --concurrency 1,8 --depths 1K --prefill "")
BENCH_TIMEOUT=150 bench_as before_1 "$AB_OLD:$PWD" "${ROWS[@]}"
BENCH_TIMEOUT=150 bench_as prologue_1 "$PWD" "${ROWS[@]}"
left 300 && bench_as before_2 "$AB_OLD:$PWD" "${ROWS[@]}"
left 320 && bench_as prologue_2 "$PWD" "${ROWS[@]}"
tl() {  # NAME ARGS: the round's timeline
  local name=$1; shift
  timeout 100 python bench/spec_timeline.py "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; grep -vE "^(INFO|WARNING)|Warn|warn" "$R/$name.txt" | tail -11
  pack
}
left 400 && tl timeline_c1 --lanes 1
left 450 && tl timeline_c8 --lanes 8
left 500 && tl timeline_c1_int4mtp --lanes 1 --quant int4-mtp
