#!/usr/bin/env bash
# One short device call: the fused GDN decode step with its loads ahead of its ticket (the state block, the conv
# taps and the next token's inputs are read before the acquiring atomic, which used to hold them back): the GPU
# tests (bit for bit the four separate kernels), then bench/gdn_kernels.py's decode rows (per layer: 9.15 us at
# C = 1 and 30.94 at C = 8 before, bench/RESULTS.md) and 35B-A3B / 27B int4 decode. Lands in $OUT/gpu_gdn_loads.tgz.
set -uo pipefail
PACK=gpu_gdn_loads; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_gdn_kernels.py > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head; pack
left 200 && { timeout 100 python bench/gdn_kernels.py > "$R/gdn_kernels.txt" 2>&1; echo "== gdn_kernels rc=$?";
  grep -iE "fused|decode|verify" "$R/gdn_kernels.txt" | head -12; pack; }
left 330 && decode_bench 35b qwen3.6-35b-a3b
left 420 && decode_bench 27b qwen3.6-27b
