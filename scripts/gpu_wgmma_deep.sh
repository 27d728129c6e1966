#!/usr/bin/env bash
# One device call (about seven minutes): the int4 warpgroup-MMA kernel with three groups' weights and x in flight
# (depth 4) instead of the next group's weights. An eight-lane MTP round of the 27B int4 (K = 3) spends 9.3 of its
# 16.2 ms in this kernel at 32 rows (bench/results/profiles/20261204-0255-*), 2-3x its bytes' time: at one group
# ahead each group waits on DRAM. The kernel's GPU tests at the new depth, its sweep at 32 rows (the packaged tile
# first), then the round with the winners (HINFER_TILES) against the packaged tiles, alternated.
# Lands in $OUT/gpu_wgmma_deep.tgz.
set -uo pipefail
PACK=gpu_wgmma_deep; source "$(dirname "$0")/device_common.sh"
timeout 90 python -m pytest -q -x tests/gpu/test_int4_wgmma.py -m gpu -p no:cacheprovider \
  -k "tiles and (tile9 or tile10 or tile11 or tile12 or tile13 or tile2)" \
  > "$R/test_int4_wgmma_tiles.txt" 2>&1
rc=$?; echo "== wgmma GPU tests rc=$rc $((SECONDS - START)) s"; tail -3 "$R/test_int4_wgmma_tiles.txt"; pack
[ $rc -eq 0 ] || exit 1
timeout "${SWEEP_S:-150}" python bench/int4_wgmma.py --ms 32 --depths 4 --tiles "$R/wgmma-d4.json" --json "$R/wgmma-d4-sweep.json" \
  > "$R/sweep_wgmma_d4.txt" 2>&1
echo "== sweep rc=$? $((SECONDS - START)) s"; grep -E "M=32 " "$R/sweep_wgmma_d4.txt" | cut -c1-230; pack
spec() { bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 8 --depths 1K --prefill "" --steps 64; }
if [ -s "$R/wgmma-d4.json" ]; then
  for run in packaged deep packaged deep; do
    left "${SPEC_UNTIL:-330}" || break
    if [ "$run" = packaged ]; then spec "spec_c8_$run"; else HINFER_TILES="$R/wgmma-d4.json" spec "spec_c8_$run"; fi
  done
fi
