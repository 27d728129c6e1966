#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): a one-lane MTP verification at K = 3 sends four tokens (36
# pairs) through the experts, which take the eight-token tiles (no 64-pair bucket is packaged). Sweep the 35B-A3B's
# experts at four tokens (x as the decode reads it), then the one-lane round in the decode graph on the winners
# (HINFER_TILES: the sweep's file, with and without the 128-register cap) against the packaged tiles, alternated.
# Lands in $OUT/gpu_experts_t4_sweep.tgz.
set -uo pipefail
PACK=gpu_experts_t4_sweep; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_one_launch 60 -rf tests/gpu/test_moe_kernels.py -k "int4 and one_launch"
timeout 200 python bench/experts_mma_tiles.py --model 35b --t 4 --splits 1,2 --max-regs 0,128 --json "$R/sweep_35b_t4.json" \
  --tuned-out "$R/tuned_35b_t4.json" > "$R/sweep_35b_t4.txt" 2>&1
echo "== sweep t4 rc=$? $((SECONDS - START)) s"; grep -E "^35b" "$R/sweep_35b_t4.txt"; pack
[ -f "$R/tuned_35b_t4.json" ] || exit 0
python - "$R/tuned_35b_t4.json" "$R/tuned_35b_t4_cap.json" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    e["tile"]["max_regs"] = 128
json.dump(entries, open(sys.argv[2], "w"), indent=1)
PY
arm() {  # arm NAME TILES
  HINFER_TILES=$2 BENCH_TIMEOUT=70 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 \
    --concurrency 1 --depths 1K --prefill "" --steps 64
}
for round in a b; do
  left 420 && arm "mtp_packaged_$round" ""
  left 450 && arm "mtp_t4_$round" "$R/tuned_35b_t4.json"
  left 480 && arm "mtp_t4_cap_$round" "$R/tuned_35b_t4_cap.json"
done
