#!/usr/bin/env bash
# One device call (carry .kcache): the 35B-A3B's experts gate_up on other tiles, in the decode graph. At eight lanes
# (72 pairs, the 128-pair bucket) the packaged tile (128 rows, 2 warps, depth 4) runs 255 registers and spills 88
# bytes (linear_aot.resources on its sm_90 build); at one token (the 16-pair bucket, routing in the launch) the
# packaged tile held to 128 registers spills 72; these do not (bench/results/tiles/moe-t8/*.json, one entry each).
# First the engine's GPU speculation tests with the fused GDN step at verification rows (HINFER_GDN_FUSED=4).
# SKIP_TESTS=1 skips them; BUDGET: seconds after which no run starts. Lands in $OUT/gpu_moe_t8_tiles.tgz.
set -uo pipefail
PACK=gpu_moe_t8_tiles; source "$(dirname "$0")/device_common.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
  HINFER_GDN_FUSED=4 timeout 60 python -m pytest -q -s tests/gpu/test_engine_gpu.py -m gpu -k "spec" -p no:cacheprovider \
    > "$R/test_engine_spec_gdn4.txt" 2>&1
  echo "== engine spec tests, fused GDN at 4 rows rc=$? $((SECONDS - START)) s"; pack
fi
one() { bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency "$2" --depths 1K --prefill ""; }
D=bench/results/tiles/moe-t8/20261203-35b
for run in c8:packaged c8:gu-128-s1-w8 c1:packaged c1:t1-gu-128-s4-w8 c8:gu-64-s1-w4 c1:t1-gu-64-s4-w4 \
           c8:gu-32-s1-w2 c1:t1-gu-128-s4-w4-d2 c8:gu-64-s1-w4-d2 c1:t1-gu-64-s2-w4 c8:gu-128-s1-w4 c8:dn-64-w2; do
  left "${BUDGET:-300}" || break
  c=${run%%:*} v=${run#*:}
  if [ "$v" = packaged ]; then one "${c}_$v" "${c#c}"; else HINFER_TILES="$D-$v.json" one "${c}_$v" "${c#c}"; fi
done
