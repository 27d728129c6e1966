#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): where a speculative round's GPU waits for the host. The
# 35B-A3B's one-lane greedy round left the GPU idle 0.65 ms of 4.46 on an H100 (2026-12-05 16:58), 0.31 ms of it
# between the acceptance read and the next verify launch; a CPU probe of that window on the tiny model gives 142 us
# (the core's bookkeeping, the drafter's hand-out, the next round's scheduling and staging). bench/spec_timeline.py
# splits each round by CUDA events and the host's clock (the verification, the drafter's pass and steps, the GPU's
# gap; the host before the read, its wait, after it to the next launch), at one and eight lanes for both models, then
# bench/profile_decode.py --host gives the host's Python per round by function. Lands in $OUT/gpu_spec_window.tgz.
set -uo pipefail
PACK=gpu_spec_window; source "$(dirname "$0")/device_common.sh"
tl() { timeout 70 python bench/spec_timeline.py --config "$1" --quant int4 --spec-k 3 --lanes "$2" > "$R/timeline_$3.txt" 2>&1
  echo "== timeline $3 rc=$?"; grep -vE "^(INFO|DEBUG|[0-9:]+ (INFO|DEBUG))" "$R/timeline_$3.txt" | tail -11; pack; }
tl qwen3.6-35b-a3b 1 35b_c1
left 120 && tl qwen3.6-35b-a3b 8 35b_c8
left 180 && tl qwen3.6-27b 1 27b_c1
if left 240; then
  timeout 90 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --spec-k 3 --lanes 1 --host \
    > "$R/host_35b_c1.txt" 2>&1
  echo "== host profile rc=$?"; grep -A30 "host time per round" "$R/host_35b_c1.txt" | head -32 | cut -c1-160; pack
fi
