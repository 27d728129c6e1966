#!/usr/bin/env bash
# One short device call (about two minutes, carry .kcache): what a speculative verify step's GDN state writes cost.
# The fused step at one and eight lanes of four tokens writing the state after every token (as verification does
# today: each accepted prefix's state kept) against writing it once, and eight tokens written once (a step that
# would replay the previous round's accepted tokens from logged inputs, then verify: one state read and one write
# a round instead of one read and four writes). If the last row is well under the first, the replay design pays
# (bench/RESULTS.md names it). Lands in $OUT/gpu_gdn_verify_writes.tgz.
set -uo pipefail
PACK=gpu_gdn_verify_writes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 150 python bench/gdn_kernels.py --verify-writes --cs 1,8 > "$R/verify_writes.txt" 2>&1
echo "== verify writes rc=$? $((SECONDS - START)) s"; grep -E "fused C=" "$R/verify_writes.txt"; pack
