#!/usr/bin/env bash
# One device call for the int4 experts with K split over programs and the down launch summing the slots (both on
# the model path, neither run on a GPU yet), then MTP rounds with verify rows on the four GDN kernels:
# the MoE and engine GPU tests, the experts tile sweep with splits (35B-A3B; MODELS=122b for the other),
# 35B-A3B int4 decode with the swept tiles and the slot sum in the down launch on / off, the 27B MTP rounds.
# Everything lands in $OUT/gpu_moe_split.tgz (the device returns a few files only).
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT/r"; R="$OUT/r"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/env.txt" 2>&1
timeout 200 python -m pytest -q -s tests/gpu/test_moe_kernels.py tests/gpu/test_engine_gpu.py -m gpu \
  -p no:cacheprovider > "$R/tests.txt" 2>&1
echo "== tests rc=$? $(grep -E 'passed|failed' "$R/tests.txt" | tail -1)"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
timeout 170 python bench/experts_mma_tiles.py --model ${MODELS:-35b} --t 1 8 --splits 1,2,4 --json "$R/experts.json" \
  --tuned-out "$R/experts_tuned.json" > "$R/experts.txt" 2>&1
echo "== experts sweep rc=$?"; grep -E "^(35b|122b)" "$R/experts.txt"
T=bench/results/20261202-experts-mma-tiles-tuned.json
[ -s "$R/experts_tuned.json" ] && python - "$T" "$R/experts_tuned.json" "$R/tiles.json" <<'PY'
import json, sys
old, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
keys = {(e["family"], e["n"], e["k"], e["m"]) for e in new}
json.dump([e for e in old if (e["family"], e["n"], e["k"], e["m"]) not in keys] + new, open(sys.argv[3], "w"))
PY
[ -s "$R/tiles.json" ] && export HINFER_TILES="$R/tiles.json"
for sum in 1 0; do
  HINFER_MOE_SUM_IN_DOWN=$sum timeout 80 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --concurrency 1,8 \
    --depths 1K --prefill "" --out "$R" > "$R/bench_35b_sum$sum.txt" 2>&1
  echo "== 35B sum-in-down=$sum rc=$?"; grep -E "decode C=" "$R/bench_35b_sum$sum.txt"
done
unset HINFER_TILES
timeout 120 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
  --prefill "" --steps 64 --out "$R" > "$R/spec.txt" 2>&1
echo "== 27B spec rc=$?"; grep -E "decode C=|spec K=" "$R/spec.txt"
tar czf "$OUT/gpu_moe_split.tgz" -C "$R" .
