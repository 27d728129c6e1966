#!/usr/bin/env bash
# One short device call (about three and a half minutes, carry .kcache): a MoE layer's expert rows summed by the
# next add + norm launch (`norm_slots` launch fusion, off until measured) instead of a sum launch of their own,
# which decode takes from four tokens on (the one-lane MTP round's verification, four and eight lanes). The GPU
# test first, then `hinfer bench qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,4,8 --depths 1K
# --prefill "" --steps 64` per arm: off; `norm_slots=64` (the down still sums one to three tokens' rows itself);
# `slot_sum=0,norm_slots=64` (the norm sums at every size). Lands in $OUT/gpu_norm_slots.tgz.
set -uo pipefail
PACK=gpu_norm_slots; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_slots 40 tests/gpu/test_norm_attention_kernels.py -k "sums_expert_rows" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=45 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp \
  --spec-k 3 --concurrency 1,4,8 --depths 1K --prefill "" --steps 64; }
left 60 && arm off_a ""
left 100 && arm norm_a "norm_slots=64"
left 140 && arm norm_all_a "slot_sum=0,norm_slots=64"
left 175 && arm off_b ""
left 200 && arm norm_b "norm_slots=64"
