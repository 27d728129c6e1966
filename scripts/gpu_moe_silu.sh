#!/usr/bin/env bash
# One device call: the int4 experts' gate_up writing silu(gate) * up itself (its 16-row stripes pair 8 gate rows
# with their 8 up rows) and the down reading that as is, against the down taking SiLU-mul as it loads
# (HINFER_MOE_SILU=down): GPU tests, 35B-A3B and 122B-A10B int4 decode at 1 and 8 lanes each way, then the experts
# tiles at one token re-swept in the new form. Everything lands in $OUT/gpu_moe_silu.tgz.
set -uo pipefail
PACK=gpu_moe_silu; source "$(dirname "$0")/device_common.sh"
timeout 160 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py -k int4 \
  > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
pack
left 250 && decode_bench 35b_act qwen3.6-35b-a3b
left 290 && HINFER_MOE_SILU=down decode_bench 35b_down qwen3.6-35b-a3b
left 330 && decode_bench 122b_act qwen3.5-122b-a10b
left 370 && HINFER_MOE_SILU=down decode_bench 122b_down qwen3.5-122b-a10b
left 420 && { timeout 130 python bench/experts_mma_tiles.py --model 35b 122b --t 1 --splits 1,2,4 \
  --tuned-out "$R/experts_t1_tuned.json" --json "$R/experts_t1.json" > "$R/experts_t1.txt" 2>&1
  echo "== tiles rc=$?"; grep -E "default" "$R/experts_t1.txt"; pack; }
