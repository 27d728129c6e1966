#!/usr/bin/env bash
# One device call (about seven minutes): the MoE models' dense int4 projections at one row (attention qkv, GDN
# in_proj, o_proj / GDN out_proj: two launches a layer, 8-9 us each in the decode graph for 1-3 us of bytes) swept
# over every tile at K splits 1, 2 and 4, the narrow ones (16-64 rows, 1-2 warps, no split) included; the winners
# merged into one HINFER_TILES file, then one-lane decode with it against the packaged tiles. Lands in
# $OUT/gpu_int4_narrow.tgz.
set -uo pipefail
PACK=gpu_int4_narrow; source "$(dirname "$0")/device_common.sh"
sweep() {  # sweep NAME SECONDS CONFIG
  timeout "$2" python bench/int4_mma_tiles.py --config "$3" --ms 1 --shapes qkv,gdn_in,o_proj --splits 1,2,4 \
    --json "$R/sweep_$1.json" --tuned-out "$R/tuned_$1.json" > "$R/sweep_$1.txt" 2>&1
  echo "== sweep $1 rc=$?"; grep -E " M=.*default" "$R/sweep_$1.txt"; pack
}
sweep 35b 200 qwen3.6-35b-a3b
sweep 122b 90 qwen3.5-122b-a10b
python - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
out = [e for f in sorted(r.glob("tuned_*.json")) for e in json.loads(f.read_text())]
(r / "tiles_narrow.json").write_text(json.dumps(out, indent=1))
print(f"{len(out)} entries")
PY
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 340 && decode_bench "$1_packaged" "$2" --concurrency 1
  left 370 && HINFER_TILES="$R/tiles_narrow.json" decode_bench "$1_narrow_tiles" "$2" --concurrency 1
done
pack
