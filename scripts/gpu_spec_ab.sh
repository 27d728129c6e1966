#!/usr/bin/env bash
# One device call (about three minutes, carry .kcache): the chain (the next round's drafts queued before the
# acceptance read) on and off in one process per model (bench/spec_ab.py: windows of 32 rounds alternating
# HINFER_SPEC_CHAIN=1 / 0 four times each), at one and eight lanes, greedy then the Qwen defaults: the pairs of
# separate processes left it inside their 5-25% spread (H100, 2026-12-05 16:58). Lands in $OUT/gpu_spec_ab.tgz.
set -uo pipefail
PACK=gpu_spec_ab; source "$(dirname "$0")/device_common.sh"
ab() { timeout 90 python bench/spec_ab.py --config "$1" --quant int4 --env HINFER_SPEC_CHAIN=1,0 --lanes 1,8 \
  --sampling "$2" > "$R/ab_$3.txt" 2>&1; echo "== $3 rc=$?"; grep -E "round .* ms" "$R/ab_$3.txt"; pack; }
ab qwen3.6-35b-a3b greedy 35b_greedy
left 200 && ab qwen3.6-27b greedy 27b_greedy
left 300 && ab qwen3.6-35b-a3b qwen 35b_qwen
