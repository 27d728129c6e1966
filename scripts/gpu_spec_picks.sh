#!/usr/bin/env bash
# One device call (about three minutes, carry .kcache): the GPU test of sampled lanes judged on the device, then MTP rounds at K = 3 with every lane sampling the Qwen defaults,
# their drafts the head's argmax (the default) and their rows judged on the device so that the drafter's pass is
# queued behind verification (spec/picks.py), as greedy rounds are. Before it (H200, 2026-12-05 11:58): 35B-A3B 4.35 /
# 9.77 ms at one / eight lanes against 4.09 / 9.66 greedy; 27B 9.50 / 15.82 against 8.77 / 15.04. Greedy beside
# qwen, int4, depth 1K. Lands in $OUT/gpu_spec_picks.tgz.
set -uo pipefail
PACK=gpu_spec_picks; source "$(dirname "$0")/device_common.sh"
gpu_tests test_picks 120 tests/gpu/test_engine_gpu.py -k "sampled_lanes_judged or spec_graphs_greedy"
for m in qwen3.6-35b-a3b qwen3.6-27b; do
  left 200 || break
  BENCH_TIMEOUT=90 bench_as "spec_picks_${m}" "$PWD" "$m" --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --sampling greedy,qwen
done
