#!/usr/bin/env bash
# One device call (carry .kcache and .whl): the serving check of speculation (a plain and a --spec mtp server on a
# random 16-layer 27B checkpoint, output tok/s at 1 and 8 streaming clients: adaptive speculation must keep >= 0.95
# of plain), then where the 27B int4 MTP round's kernel time goes at one lane with PDL on (exposed per kernel).
# Lands in $OUT/gpu_specserve_profile.tgz.
set -uo pipefail
PACK=gpu_specserve_profile; source "$(dirname "$0")/device_common.sh"
server_wheels
spec_serving 430
left 480 && timeout 100 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 --pdl > "$R/profile_round_c1.txt" 2>&1
echo "== profile rc=$? $((SECONDS - START)) s"; grep -v Warn "$R/profile_round_c1.txt" | head -24
pack
