#!/usr/bin/env bash
# One device call: the one-token experts tiles for the 122B-A10B re-swept with the gate_up writing silu(gate) * up
# (the 35B-A3B's came from gpu_moe_silu.sh, in bench/results/tiles/), then 35B-A3B and 122B-A10B int4 decode with
# both models' new tiles through HINFER_TILES. Lands in $OUT/gpu_moe_act_tiles.tgz.
set -uo pipefail
PACK=gpu_moe_act_tiles; source "$(dirname "$0")/device_common.sh"
timeout 200 python bench/experts_mma_tiles.py --model 122b --t 1 --splits 1,2,4 --tuned-out "$R/experts_t1_122b.json" \
  --json "$R/experts_t1_122b_rows.json" > "$R/experts_t1_122b.txt" 2>&1
echo "== tiles rc=$?"; grep -E "default" "$R/experts_t1_122b.txt"; pack
python - "$R" <<'PY'
import json, sys
r = sys.argv[1]
rows = json.load(open("bench/results/tiles/20261202-2305-experts-t1-act-35b.json"))
try:
    rows += json.load(open(f"{r}/experts_t1_122b.json"))
except OSError:
    pass
json.dump(rows, open(f"{r}/tiles.json", "w"))
print(len(rows), "tiles")
PY
export HINFER_TILES="$R/tiles.json"
left 330 && decode_bench 35b_tiles qwen3.6-35b-a3b
left 380 && decode_bench 122b_tiles qwen3.5-122b-a10b
unset HINFER_TILES
left 430 && decode_bench 35b_default qwen3.6-35b-a3b
left 480 && decode_bench 122b_default qwen3.5-122b-a10b
