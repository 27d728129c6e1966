#!/usr/bin/env bash
# One device call (carry .kcache): the 35B-A3B's experts at eight tokens (72 pairs, the 128-pair bucket) on other
# tiles, in the decode graph at eight lanes: the packaged gate_up tile (128 rows, 2 warps, depth 4) runs 255
# registers and spills 88 bytes (linear_aot.resources on its sm_90 compile), these do not
# (bench/results/tiles/moe-t8/*.json, one entry each). First the engine's GPU speculation tests with the fused GDN
# step at verification rows (HINFER_GDN_FUSED=4). BUDGET: seconds after which no variant starts.
# Lands in $OUT/gpu_moe_t8_tiles.tgz.
set -uo pipefail
PACK=gpu_moe_t8_tiles; source "$(dirname "$0")/device_common.sh"
HINFER_GDN_FUSED=4 timeout 90 python -m pytest -q -s tests/gpu/test_engine_gpu.py -m gpu -k "spec" -p no:cacheprovider \
  > "$R/test_engine_spec_gdn4.txt" 2>&1
echo "== engine spec tests, fused GDN at 4 rows rc=$? $((SECONDS - START)) s"; pack
one() { bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 8 --depths 1K --prefill ""; }
D=bench/results/tiles/moe-t8/20261203-35b
one packaged
for v in gu-128-s1-w8 gu-64-s1-w4 gu-32-s1-w2 gu-64-s1-w4-d2 gu-128-s1-w4 gu-64-s2-w4 dn-64-w2 dn-128-w4 dn-32-w2-d4; do
  left "${BUDGET:-300}" || break
  HINFER_TILES="$D-$v.json" one "$v"
done
