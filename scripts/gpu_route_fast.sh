#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache with the older tree in .kcache/ab: `git archive c856eeb hinfer |
# tar -x -C .kcache/ab`): the top-8 route at the head of every experts program rewritten for latency (each warp the
# whole row, no shared memory or barrier; one integer warp reduction a slot; the softmax's row sum cancelled; the
# logits read coalesced and unmasked) and the route kernel on int32 keys, against the forms before them. The routed
# GPU tests (ids as the route kernel's, gate_up bit for bit, PDL graph chains, the one launch, the route kernel
# against the reference), a layer's parts (the gate_up routing against given its ids: the route's cost), then the
# 35B-A3B one- and eight-lane decode and MTP rounds on the older tree and this one, alternated, this one with
# the router row read once a program (HINFER_ROUTE_READ=once), and the 122B-A10B's one-lane decode on both trees if
# time is left. Lands in $OUT/gpu_route_fast.tgz.
set -uo pipefail
PACK=gpu_route_fast; source "$(dirname "$0")/device_common.sh"
gpu_tests test_route 150 tests/gpu/test_moe_kernels.py -k "routes or one_launch or route_real" || exit 0
left 150 && timeout 70 python bench/moe_one_launch.py --rounds 3 > "$R/parts.txt" 2>&1; grep -E "^  " "$R/parts.txt"; pack
arm() { HINFER_ROUTE_READ="$3" BENCH_TIMEOUT=60 bench_as "$1" "$2" qwen3.6-35b-a3b --quant int4 --spec mtp \
  --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64; }
OLD="$PWD/.kcache/ab:$PWD"
left 230 && arm old_a "$OLD" warps
left 270 && arm new_a "$PWD" warps
left 310 && arm once_a "$PWD" once
left 350 && arm old_b "$OLD" warps
left 390 && arm new_b "$PWD" warps
left 430 && arm once_b "$PWD" once
left 470 && HINFER_ROUTE_READ=once gpu_tests test_route_once 60 tests/gpu/test_moe_kernels.py -k "gate_up_routes or down_routes"
arm122() { BENCH_TIMEOUT=80 bench_as "$1" "$2" qwen3.5-122b-a10b --quant int4 --concurrency 1 --depths 1K --prefill "" \
  --steps 128; }
left 420 && arm122 old_122b "$OLD"
left 500 && arm122 new_122b "$PWD"
