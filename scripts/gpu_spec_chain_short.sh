#!/usr/bin/env bash
# A short device call (about two and a half minutes, carry .kcache with the tree before under .kcache/ab): the GPU
# tests of speculation through the graphs with the drafts' chain, then the 35B-A3B's greedy MTP rounds (int4, K =
# 3, one and eight lanes) of this tree against the tree before it. The full call is scripts/gpu_spec_chain.sh.
set -uo pipefail
PACK=gpu_spec_chain_short; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
[ -e "$AB_OLD/hinfer/assets" ] || ln -s "$PWD/hinfer/assets" "$AB_OLD/hinfer/assets"
gpu_tests test_spec 70 tests/gpu/test_engine_gpu.py -k "spec_graphs_greedy"
spec() { BENCH_TIMEOUT=45 bench_as "$1" "$2" qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
  --depths 1K --prefill "" --steps 64; }
left 80 && spec chain_35b "$PWD"
left 125 && spec before_35b "$AB_OLD:$PWD"
