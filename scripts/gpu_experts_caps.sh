#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the int4 experts' GPU tests on the packaged tiles (the
# one-token gate_ups on 64 columns; the 122B-A10B's one launch kept on its 128-column tile), then the 35B-A3B's
# experts tiles past one lane held to 168 and 192 registers (packaged: 255, uncapped) against the packaged tiles in
# the decode graph, one and eight lanes, two alternated rounds. Lands in $OUT/gpu_experts_caps.tgz.
set -uo pipefail
PACK=gpu_experts_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_one_launch 90 -rf tests/gpu/test_moe_kernels.py -k "int4 and one_launch"
gpu_tests test_experts 230 -rf tests/gpu/test_moe_kernels.py -k "int4 and not one_launch"
python bench/tile_variants.py --config qwen3.6-35b-a3b --variants max_regs=168 max_regs=192 --min-m 32 \
  --families moe_int4_mma --out-dir "$R/tiles" > /dev/null
ls "$R/tiles"
for round in a b; do
  left 530 && tiles_arm "packaged_$round" "" qwen3.6-35b-a3b --concurrency 1,8
  for f in "$R"/tiles/*.json; do
    left 530 && tiles_arm "$(basename "$f" .json | sed 's/^qwen3.6-35b-a3b-//')_$round" "$f" qwen3.6-35b-a3b --concurrency 1,8
  done
done
