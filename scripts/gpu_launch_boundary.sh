#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): what a kernel boundary costs, on a chain of 32 square bf16
# GEMVs (bench/launch_boundary.py): one launch a GEMV with and without programmatic dependent launch, the engine's
# bf16 GEMV, and one persistent launch walking the chain with a grid barrier between GEMVs (and its weights'
# first block ahead of the barrier; and no barrier, the streaming bound), at D = 1K-5K. Its interpreter tests
# first (on the GPU they run compiled: the chains against torch). Lands in $OUT/gpu_launch_boundary.tgz.
set -uo pipefail
PACK=gpu_launch_boundary; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 400 python bench/launch_boundary.py --json "$R/launch_boundary.json" > "$R/launch_boundary.txt" 2>&1
echo "== launch_boundary rc=$? $((SECONDS - START)) s"; grep -E "D=|copy" "$R/launch_boundary.txt"; pack
