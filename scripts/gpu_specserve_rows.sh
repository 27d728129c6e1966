#!/usr/bin/env bash
# One device call: the serving check of speculation (a plain and a --spec mtp server on a random 16-layer 27B
# checkpoint, tok/s at 1 and 8 streaming clients: adaptive speculation must keep >= 0.95 of plain), then the 27B
# int4 plain decode at 1, 2, 4 and 8 lanes of this tree against the tree before its 2- and 4-row int4_a8 entries
# (AB_OLD: that tree's hinfer package, carried under .kcache; python -P so that PYTHONPATH decides), alternated.
# Lands in $OUT/gpu_specserve_rows.tgz.
set -uo pipefail
PACK=gpu_specserve_rows; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 400 python -m hinfer bench qwen3.6-27b --spec-serving --layers 16 --concurrency 1,8 --out "$R" \
  > "$R/spec_serving.txt" 2>&1
echo "== spec serving rc=$? $((SECONDS - START)) s"; tail -14 "$R/spec_serving.txt"
pack
ROWS=(qwen3.6-27b --quant int4 --concurrency 1,2,4,8 --depths 1K --prefill "")
for i in 1 2; do
  left 450 && bench_as "before_$i" "$AB_OLD:$PWD" "${ROWS[@]}"
  left 480 && bench_as "rows24_$i" "$PWD" "${ROWS[@]}"
done
