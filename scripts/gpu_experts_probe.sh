#!/usr/bin/env bash
# One device call (about three minutes, carry .kcache): where the experts' launches at eight and 32 tokens go,
# program by program (`bench/moe_chain_probe.py --tokens 8 32 --only-tokens`: each program's SM clock at entry,
# wait, expert known, k loop done, epilogue, end; its k loop's time; the selected experts' bytes a second over
# the launch). At eight lanes the 35B-A3B's experts take 1,968 of a 4.10 ms step (H200, 2026-12-05) and read their
# bytes at 33-37% of DRAM bandwidth (Nsight Compute, 2026-12-03): a launch short of bandwidth because each program
# streams slowly, or because its 2.2 waves leave SMs idle at their tails, wants different kernels. The 35B-A3B,
# then the 122B-A10B. Lands in $OUT/gpu_experts_probe.tgz.
set -uo pipefail
PACK=gpu_experts_probe; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
probe() {  # probe MODEL
  timeout 100 python bench/moe_chain_probe.py --model "$1" --tokens 8 32 --only-tokens --layers 16 \
    --json "$R/probe_$1.json" > "$R/probe_$1.txt" 2>&1
  echo "== probe $1 rc=$? $((SECONDS - START)) s"; grep -vi warn "$R/probe_$1.txt" | head -60; pack
}
left 200 && probe 35b
left 300 && probe 122b
