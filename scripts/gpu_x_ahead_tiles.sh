#!/usr/bin/env bash
# One device call: x loaded ahead of its MMA is a tile attribute of the dense int4 kernel (x_ahead; it won 2-4%
# on the 27B and lost 3% on the 35B-A3B as one switch). The packaged tile each way at every dense int4 shape of
# the 27B and 122B-A10B and the 35B-A3B's at 8 rows (bench/int4_mma_tiles.py --packaged --x-ahead); at one row
# the 35B-A3B's small matrices get the whole sweep, narrow tiles (16-64 rows, 1-2 warps) and x ahead included.
# The winners merged into one HINFER_TILES file, then int4 decode at 1 and 8 lanes with it against the packaged
# tiles, then the kernel's GPU tests. Two calls, each under six minutes: `sweep` (lands tiles_x_ahead.json) and
# `bench TILES` (the decode benches with that file, then the tests). Lands in $OUT/gpu_x_ahead_tiles_STEP.tgz.
set -uo pipefail
STEP=${1:?usage: gpu_x_ahead_tiles.sh sweep | bench TILES}
PACK=gpu_x_ahead_tiles_$STEP; source "$(dirname "$0")/device_common.sh"
sweep() {  # sweep NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  timeout "$secs" python bench/int4_mma_tiles.py --x-ahead --json "$R/sweep_$name.json" \
    --tuned-out "$R/tuned_$name.json" "$@" > "$R/sweep_$name.txt" 2>&1
  echo "== sweep $name rc=$?"; grep -E " M=.*default" "$R/sweep_$name.txt"; pack
}
if [ "$STEP" = sweep ]; then
sweep 27b 90 --packaged --ms 1,4,8,16,32
sweep 35b_m1 150 --config qwen3.6-35b-a3b --ms 1
sweep 35b_m8 40 --packaged --config qwen3.6-35b-a3b --ms 8
sweep 122b 50 --packaged --config qwen3.5-122b-a10b --ms 1,8
python - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
out = [e for f in sorted(r.glob("tuned_*.json")) for e in json.loads(f.read_text())]
(r / "tiles_x_ahead.json").write_text(json.dumps(out, indent=1))
print(f"{sum(e['tile'].get('x_ahead', False) for e in out)} of {len(out)} entries take x ahead")
PY
pack; exit 0
fi
TILES=${2:?bench needs the tiles file the sweep wrote}
for m in "27b qwen3.6-27b" "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 330 && decode_bench "$1_packaged" "$2"
  left 350 && HINFER_TILES="$TILES" decode_bench "$1_x_ahead_tiles" "$2"
done
left 360 && timeout 100 python -m pytest -q -m gpu --tb=short -p no:cacheprovider tests/gpu/test_int4_mma.py \
  > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -12; pack
