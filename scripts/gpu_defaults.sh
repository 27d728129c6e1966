#!/usr/bin/env bash
# One device call for the defaults as they now stand: the slot-sum / split / tail GPU tests, 35B-A3B and 27B int4
# decode (+ the 27B's MTP rounds), the 122B-A10B experts tile sweep at one token with K splits and its decode
# with the swept tiles. Steps past their time guard are skipped. Everything lands in $OUT/gpu_defaults.tgz.
set -uo pipefail
PACK=gpu_defaults; source "$(dirname "$0")/device_common.sh"
timeout 110 python -m pytest -q tests/gpu/test_moe_kernels.py tests/gpu/test_int4_mma.py -m gpu --tb=short \
  -k "sums_the_slots or split_k or tail_rows" -p no:cacheprovider > "$R/tests.txt" 2>&1
echo "== slot sum / split / tail tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -8
pack
timeout 60 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill "" \
  --out "$R" > "$R/bench_35b.txt" 2>&1
echo "== 35B-A3B int4 rc=$?"; grep -E "decode C=" "$R/bench_35b.txt"
timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
  --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_27b.txt" 2>&1
echo "== 27B int4 + MTP rc=$?"; grep -E "decode C=|spec K=" "$R/bench_27b.txt"
pack
left 300 && timeout 170 python bench/experts_mma_tiles.py --model 122b --t 1 --splits 1,2,4 \
  --json "$R/experts_122b.json" --tuned-out "$R/experts_122b_tuned.json" > "$R/experts_122b.txt" 2>&1
echo "== 122B experts sweep rc=$?"; grep -E "^122b" "$R/experts_122b.txt"
pack
if [ -s "$R/experts_122b_tuned.json" ] && left 430; then
  HINFER_TILES="$R/experts_122b_tuned.json" timeout 120 python -m hinfer bench qwen3.5-122b-a10b --quant int4 \
    --concurrency 1,8 --depths 1K --prefill "" --out "$R" > "$R/bench_122b.txt" 2>&1
  echo "== 122B-A10B int4 with the swept tiles rc=$?"; grep -E "decode C=" "$R/bench_122b.txt"
fi
pack
