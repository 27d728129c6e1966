#!/usr/bin/env bash
# One device call: the int4 experts' down launch with its weights prefetched into L2 before its PDL wait
# (HINFER_MOE_L2_PREFETCH, groups of a row), and the dense int4 kernels' L2 prefetch (HINFER_INT4_L2_PREFETCH, 7%
# slower at the 27B's large shapes) at the MoE models' small ones: the GPU test, then int4 35B-A3B and 122B-A10B at
# 1 and 8 lanes each way, the baseline first and last. Everything lands in $OUT/gpu_moe_prefetch.tgz.
set -uo pipefail
PACK=gpu_moe_prefetch; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  -k "l2_prefetch_changes_nothing" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head; pack
left 200 && decode_bench 35b_base qwen3.6-35b-a3b
left 220 && HINFER_MOE_L2_PREFETCH=4 decode_bench 35b_moe4 qwen3.6-35b-a3b
left 240 && HINFER_INT4_L2_PREFETCH=8 decode_bench 35b_int4pf8 qwen3.6-35b-a3b
left 260 && HINFER_INT4_L2_PREFETCH=4 decode_bench 35b_int4pf4 qwen3.6-35b-a3b
left 280 && HINFER_MOE_L2_PREFETCH=4 HINFER_INT4_L2_PREFETCH=8 decode_bench 35b_both qwen3.6-35b-a3b
left 320 && decode_bench 122b_base qwen3.5-122b-a10b
left 350 && HINFER_MOE_L2_PREFETCH=8 decode_bench 122b_moe8 qwen3.5-122b-a10b
left 380 && HINFER_INT4_L2_PREFETCH=8 decode_bench 122b_int4pf8 qwen3.5-122b-a10b
left 420 && decode_bench 35b_base_again qwen3.6-35b-a3b
