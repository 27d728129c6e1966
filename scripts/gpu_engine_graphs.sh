#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the graphs for every lane count to eight (captured since
# 2026-12-06; measured then on the plain decode only): the engine's GPU tests on them (lanes finishing at
# different times replay the three-, five-, six- and seven-lane graphs, speculative verify and draft graphs too),
# then the MoE models' MTP rounds at three, five and eight lanes. Lands in $OUT/gpu_engine_graphs.tgz.
set -uo pipefail
PACK=gpu_engine_graphs; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
gpu_tests test_engine 240 tests/gpu/test_engine_gpu.py -k "graph or decode_ahead or spec"
for m in qwen3.6-35b-a3b qwen3.6-27b; do
  left 420 && BENCH_TIMEOUT=90 bench_as "${m##*-}_mtp_lanes" "$PWD" $m --quant int4 --spec mtp --spec-k 3 \
    --concurrency 3,5,8 --depths 1K --prefill "" --steps 32
done
