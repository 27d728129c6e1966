#!/usr/bin/env bash
# One device call (about three minutes, carry .kcache): where a one-token int4 launch spends its time. Each program
# stamps its SM clock at entry, PDL wait done, expert known, k loop done, K-split epilogue done and end
# (bench/moe_chain_probe.py), in a PDL-chained CUDA graph of 24 launches: the experts gate_up routing and given its
# experts' ids, and the dense GDN projections at one row, each also with every group's x loaded with its weights
# (x ahead), at the 35B-A3B and 122B-A10B shapes. On an H100 the 35B-A3B's gate_up took 12.1 us a layer routing,
# 11.9 given its ids, for 9.4 MB (a 2.8 us byte floor); its dense projections average about 7 us a launch on the
# H200 for 4-13 MB. Lands in $OUT/gpu_chain_probe.tgz.
set -uo pipefail
PACK=gpu_chain_probe; source "$(dirname "$0")/device_common.sh"
for model in 35b 122b; do
  timeout 120 python bench/moe_chain_probe.py --model $model --json "$R/probe_$model.json" > "$R/probe_$model.txt" 2>&1
  echo "== probe $model rc=$? $((SECONDS - START)) s"; grep -vE "^\s*$" "$R/probe_$model.txt" | tail -50; pack
done
