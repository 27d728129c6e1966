#!/usr/bin/env bash
# One device call (carry .kcache and .whl): the speculative server with adaptive speculation's plain steps run
# ahead (a plain and a --spec mtp server on a random 16-layer 27B checkpoint, output tok/s at 1 and 8 streaming
# clients: the line is >= 0.95x plain); the GPU engine tests of speculation (greedy identity through the graphs);
# then an MTP round's parts at one lane with the fused GDN step at verification's K + 1 rows against the default.
# Lands in $OUT/gpu_spec_next.tgz.
set -uo pipefail
PACK=gpu_spec_next; source "$(dirname "$0")/device_common.sh"
server_wheels
spec_serving 330
left 420 && timeout 120 python -m pytest -q -s tests/gpu/test_engine_gpu.py -m gpu -k "spec or ahead" \
  -p no:cacheprovider > "$R/test_engine_spec.txt" 2>&1
echo "== engine spec tests rc=$? $((SECONDS - START)) s"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/test_engine_spec.txt" | tail -4
pack
for arm in 1 4; do
  left 530 || break
  HINFER_GDN_FUSED=$arm timeout 60 python bench/spec_timeline.py --lanes 1 > "$R/timeline_gdn_fused_$arm.txt" 2>&1
  echo "== timeline HINFER_GDN_FUSED=$arm rc=$? $((SECONDS - START)) s"
  grep -vE "^(INFO|WARNING)|[Ww]arn" "$R/timeline_gdn_fused_$arm.txt" | tail -9
  pack
done
