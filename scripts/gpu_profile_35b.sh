#!/usr/bin/env bash
# One short device call (about two and a half minutes, carry .kcache): where the 35B-A3B int4's time goes with the
# experts' gate_up routing up to three tokens: `bench/profile_decode.py` (PDL off: each kernel's own time) in the
# one-lane MTP round at K = 3 (its four-token verification takes the route kernel, the alignment and the slot sum)
# and at one lane of plain decode. Lands in $OUT/gpu_profile_35b.tgz.
set -uo pipefail
PACK=gpu_profile_35b; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
prof() {  # prof NAME ARGS...
  local name=$1; shift
  timeout 70 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; head -16 "$R/$name.txt" | grep -vi warn; pack
}
prof prof_35b_mtp_c1 --spec-k 3 --lanes 1
left 120 && prof prof_35b_c1 --lanes 1
