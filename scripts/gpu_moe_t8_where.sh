#!/usr/bin/env bash
# One device call (about eight minutes): why the 35B-A3B's routed experts run at two fifths of copy bandwidth at
# eight tokens (47% of its eight-lane step). Nsight Compute on the experts' gate_up and down at eight tokens and at
# one (stall reasons, occupancy, DRAM throughput), the engine's GPU speculation tests with the fused GDN step at
# verification rows (the default since it measured faster), where a 27B int4 step goes now at one lane and where
# its MTP round goes at eight, then the experts' tiles without spills as the budget allows
# (scripts/gpu_moe_t8_tiles.sh). Lands in $OUT/gpu_moe_t8_where.tgz.
set -uo pipefail
PACK=gpu_moe_t8_where; source "$(dirname "$0")/device_common.sh"
for spec in "gate_up 8" "down 8" "gate_up 1"; do
  set -- $spec
  ncu_run "ncu_experts_35b_$1_t$2" int4_mma_experts_kernel 45 bench/experts_mma_ncu.py --model 35b --proj "$1" --t "$2"
done
timeout 60 python -m pytest -q -s tests/gpu/test_engine_gpu.py -m gpu -k "spec" -p no:cacheprovider \
  > "$R/test_engine_spec_gdn4.txt" 2>&1
echo "== engine spec tests rc=$? $((SECONDS - START)) s"; tail -3 "$R/test_engine_spec_gdn4.txt"; pack
if left 300; then
  timeout 70 python bench/profile_decode.py --config qwen3.6-27b --quant int4 --lanes 1 --pdl > "$R/profile_27b_c1.txt" 2>&1
  echo "== 27B one-lane step rc=$? $((SECONDS - START)) s"; head -32 "$R/profile_27b_c1.txt"; pack
fi
if left 380; then
  timeout 80 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 8 --pdl > "$R/profile_spec_c8.txt" 2>&1
  echo "== 27B MTP round, eight lanes rc=$? $((SECONDS - START)) s"; head -32 "$R/profile_spec_c8.txt"; pack
fi
one() { bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency "$2" --depths 1K --prefill ""; }
D=bench/results/tiles/moe-t8/20261203-35b
for run in c8:gu-32-s1-w2 c8:gu-64-s1-w4-d2 c8:packaged c8:dn-64-w2 c8:gu-128-s1-w4; do
  left 470 || break
  c=${run%%:*} v=${run#*:}
  if [ "$v" = packaged ]; then one "${c}_$v" "${c#c}"; else HINFER_TILES="$D-$v.json" one "${c}_$v" "${c#c}"; fi
done
