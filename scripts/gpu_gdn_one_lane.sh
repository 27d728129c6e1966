#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): the fused GDN step's one- and two-lane tile in the decode
# graph. Alone the packaged (16 columns, 1 warp) ran 7.12 us a 27B layer at one lane on an H100 against 6.33 on
# (32, 2) and 6.41 on (64, 4) (2026-12-07); on the H200 6.55 against 6.21 / 6.01 (2026-12-04). The packaged rows
# against those two for one and two lanes (HINFER_GDN_FUSED_TILES), the 27B and the 35B-A3B at int4, alternated:
# `hinfer bench MODEL --quant int4 --concurrency 1,2 --depths 1K --prefill ""`. Lands in $OUT/gpu_gdn_one_lane.tgz.
set -uo pipefail
PACK=gpu_gdn_one_lane; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
arm() {  # arm NAME MODEL [TILES]
  HINFER_GDN_FUSED_TILES="${3:-}" BENCH_TIMEOUT=70 bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 1,2 \
    --depths 1K --prefill ""
}
for round in a b; do
  for m in 27b:qwen3.6-27b 35b:qwen3.6-35b-a3b; do
    name=${m%%:*} model=${m#*:}
    left 420 && arm "${name}_packaged_$round" "$model"
    left 440 && arm "${name}_32x2_$round" "$model" "2:32:2,inf:32:2"
    left 460 && arm "${name}_64x4_$round" "$model" "2:64:4,inf:32:2"
  done
done
