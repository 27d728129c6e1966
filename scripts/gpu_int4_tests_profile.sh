#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): `tests/gpu/test_int4_mma.py` whole (a 2026-12-06 call was
# cut after 97 passing cases), the GPU tests of the experts' routing launches and of the folded MoE layers against
# the reference (the expert rows summed by the next norm, on by default since 2026-12-06 20:07), then where the
# 35B-A3B's time goes: `bench/profile_decode.py` (PDL off: each kernel's own time) in the one-lane MTP round at K = 3
# (its four-token verification takes the route kernel and the alignment) and at four lanes of plain decode. Lands
# in $OUT/gpu_int4_tests_profile.tgz.
set -uo pipefail
PACK=gpu_int4_tests_profile; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_int4_mma 230 tests/gpu/test_int4_mma.py
left 250 && gpu_tests test_routes 60 tests/gpu/test_moe_kernels.py -k "routes"
left 280 && gpu_tests test_folded 60 tests/gpu/test_engine_gpu.py -k "folded_moe"
prof() {  # prof NAME ARGS...
  local name=$1; shift
  timeout 70 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; head -16 "$R/$name.txt" | grep -vi warn; pack
}
left 330 && prof prof_35b_mtp_c1 --spec-k 3 --lanes 1
left 360 && prof prof_35b_c4 --lanes 4
