#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): the int4 experts' gate_up launch routing up to four tokens
# itself, a block per (token, expert) pair (HINFER_FUSION_ROWS=route=4,...), against the route kernel + the
# alignment + the grouped blocks + the separate slot sum that T = 2-4 take by default. A 35B-A3B MTP round at one
# lane verifies 4 tokens: the route, alignment and slot-sum launches took 131 + 99 + 84 us of a 4.46 ms round (H100,
# 2026-12-05 16:58 profile); plain decode at two to four lanes takes the same path. Measured at 2026-12-05 17:31 it
# lost (-2.6% / -3.8% at two / four lanes, +2.1% on the round): every program then read the router row per warp and
# each pair's x per group; since, a routing program reads the row once (+5.5% at one lane) and stages its one row of
# x in shared memory (+3.4%), which the pairs' blocks take too. So again: the GPU tests of the routed launch at T =
# 1, 2, 4 (ids, weights, gate_up bit for bit, the layer against the two-launch route, a PDL graph chain), then
# `hinfer bench qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,2,3,4` per arm, alternated. The
# pairs still read the shared expert once per token. Then the fp8 experts' routing gate_up at two to four lanes
# (HINFER_FUSION_ROWS=route_fp8=4). Lands in $OUT/gpu_moe_route_rows.tgz.
set -uo pipefail
PACK=gpu_moe_route_rows; source "$(dirname "$0")/device_common.sh"
gpu_tests test_route_rows 150 tests/gpu/test_moe_kernels.py -k "routes" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=90 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --spec mtp \
  --spec-k 3 --concurrency 1,2,3,4 --depths 1K --prefill "" --steps 64; }
ROWS4="route=4,down_route=4,slot_sum=4"
left 230 && arm default_a ""
left 310 && arm rows4_a "$ROWS4"
left 390 && arm default_b ""
left 470 && arm rows4_b "$ROWS4"
# the fp8 experts' gate_up routing two to four tokens as well (`route_fp8`, one token by default)
fp8() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=45 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant fp8 --concurrency 2,3,4 \
  --depths 1K --prefill ""; }
left 500 && fp8 fp8_default ""
left 530 && fp8 fp8_rows4 "route_fp8=4"
