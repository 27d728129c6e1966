#!/usr/bin/env bash
# One short device call: the fused GDN step's tickets as release (arrival) and acquire (only the last program,
# before it writes the q / k conv state or reads the head's rows back), instead of acq_rel on every arrival and a
# fenced reset at the end of the last program (SASS: 4 -> 2 MEMBAR.ALL.GPU, no L1 invalidation after the
# arrivals). Its GPU tests, then the step alone (bench/gdn_kernels.py --decode-only) against the tree before it
# (AB_OLD: that tree's hinfer package under .kcache; python -P), alternated, then the 35B-A3B's decode each way.
# Lands in $OUT/gpu_gdn_tickets.tgz.
set -uo pipefail
PACK=gpu_gdn_tickets; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 90 python -m pytest -q -m gpu --tb=short -p no:cacheprovider tests/gpu/test_gdn_kernels.py -k fused \
  > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
pack
alone() {  # NAME PYTHONPATH
  env PYTHONPATH="$2" timeout 45 python -P bench/gdn_kernels.py --decode-only --cs 1,8 > "$R/$1.txt" 2>&1
  echo "== $1 rc=$?"; grep -E "fused" "$R/$1.txt" | head -4
}
for i in 1 2; do
  left 150 && alone "alone_before_$i" "$AB_OLD:$PWD"
  left 170 && alone "alone_tickets_$i" "$PWD"
done
pack
D35=(qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill "")
left 190 && BENCH_TIMEOUT=70 bench_as decode35_before "$AB_OLD:$PWD" "${D35[@]}"
left 240 && BENCH_TIMEOUT=70 bench_as decode35_tickets "$PWD" "${D35[@]}"
