#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): every launch of the int4 decode step against the programs an
# SM holds (`bench/waves.py`): the 27B, the 35B-A3B and the 122B-A10B at one and eight lanes, grids just past a
# whole wave marked. Lands in $OUT/gpu_waves.tgz.
set -uo pipefail
PACK=gpu_waves; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
for spec in "qwen3.6-35b-a3b 1" "qwen3.6-35b-a3b 8" "qwen3.5-122b-a10b 1" "qwen3.5-122b-a10b 8" "qwen3.6-27b 1" \
    "qwen3.6-27b 8"; do
  set -- $spec
  left "${BUDGET:-200}" || break
  name="waves_${1}_c$2"
  timeout 90 python bench/waves.py --config "$1" --quant int4 --lanes "$2" > "$R/$name.txt" 2>&1
  rc=$?; echo "== $name rc=$rc $((SECONDS - START)) s"; grep -E " <-$" "$R/$name.txt" | head -12; pack
  [ $rc = 0 ] || { tail -5 "$R/$name.txt"; break; }
done
