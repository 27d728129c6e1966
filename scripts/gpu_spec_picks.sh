#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): sampled MTP rounds judged on the device (engine/spec/picks.py:
# the Qwen defaults, argmax drafts, each verified row's next token and acceptance on the device, the drafter's pass
# queued behind verification as for greedy rounds). Measured on an H100 (2026-12-05 12:35): 3-4% over a greedy round;
# before it on the H200 (11:58, host-side acceptance): 35B-A3B 4.35 / 9.77 ms at one / eight lanes against 4.09 / 9.66
# greedy, 27B 9.50 / 15.82 against 8.77 / 15.04. The GPU tests (the engine through captured graphs; the judging
# kernel against its torch body), then greedy beside qwen per model, int4, K = 3, depth 1K, and the 35B-A3B's
# sampled rounds with the judging kernel (HINFER_SPEC_PICKS_KERNEL=1: one launch after the top-k instead of about
# twenty). Lands in $OUT/gpu_spec_picks.tgz.
set -uo pipefail
PACK=gpu_spec_picks; source "$(dirname "$0")/device_common.sh"
gpu_tests test_picks 150 tests/gpu/test_engine_gpu.py tests/gpu/test_sampler_gpu.py -k "sampled_lanes_judged or spec_picks"
spec() { BENCH_TIMEOUT=80 bench_as "$1" "$PWD" "$2" --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
  --prefill "" --steps 64 --sampling "$3"; }
spec spec_picks_35b qwen3.6-35b-a3b greedy,qwen
spec spec_picks_27b qwen3.6-27b greedy,qwen
left 330 && HINFER_SPEC_PICKS_KERNEL=1 spec spec_picks_kernel_35b qwen3.6-35b-a3b qwen
left 400 && HINFER_SPEC_PICKS_KERNEL=1 spec spec_picks_kernel_27b qwen3.6-27b qwen
