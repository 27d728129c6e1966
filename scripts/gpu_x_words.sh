#!/usr/bin/env bash
# One device call (about five minutes): x read as bf16 pairs (int32 words) by the int4 kernels and the ring's
# x-ahead loop unrolled by two (no register copies): the GPU tests of both kernels that take x this way, the
# dense kernel against its read probe at the 27B's shapes, then int4 decode on the 27B and the 35B-A3B.
# Lands in $OUT/gpu_x_words.tgz.
set -uo pipefail
PACK=gpu_x_words; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_int4_mma.py \
  -k "27b_shapes or ring or x_ahead or pdl_graph or tail or twin or rows_of_x" > "$R/tests_int4.txt" 2>&1
echo "== int4 tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests_int4.txt" | head -8; pack
left 200 && timeout 90 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_moe_kernels.py \
  -k "int4 and not 2048" > "$R/tests_moe.txt" 2>&1
echo "== moe tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests_moe.txt" | head -8; pack
left 260 && timeout 70 python bench/int4_read_ceiling.py --json "$R/read_ceiling_27b.json" > "$R/read_ceiling_27b.txt" 2>&1
echo "== read ceiling rc=$?"; grep -E "kernel" "$R/read_ceiling_27b.txt" | cut -c1-60; pack
left 330 && decode_bench 27b_x_words qwen3.6-27b
left 400 && decode_bench 35b_x_words qwen3.6-35b-a3b
