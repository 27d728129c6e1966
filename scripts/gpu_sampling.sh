#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): what sampling costs at decode, and the candidate path in one
# launch. The server fills the sampling fields a request leaves out from the checkpoint's generation_config
# (Qwen3.5 / 3.6: temperature 1, top_k 20, top_p 0.95), so the served decode path is the sampler's 20-candidate one,
# not greedy's argmax. The GPU sampler test, then the 35B-A3B and the 27B at int4, one and eight lanes, depth 1K:
# every lane greedy / qwen / top-p (the whole vocabulary sorted) / full (the race over every id) on the torch body,
# then greedy / qwen with the candidate kernel (HINFER_SAMPLER_KERNEL=1). Lands in $OUT/gpu_sampling.tgz.
set -uo pipefail
PACK=gpu_sampling; source "$(dirname "$0")/device_common.sh"
gpu_tests test_sampler 90 tests/gpu/test_sampler_gpu.py
for m in qwen3.6-35b-a3b qwen3.6-27b; do
  left 330 || break
  BENCH_TIMEOUT=120 bench_as "sampling_${m}" "$PWD" "$m" --quant int4 --concurrency 1,8 --depths 1K --prefill "" \
    --sampling greedy,qwen,top-p,full
  left 450 || break
  HINFER_SAMPLER_KERNEL=1 BENCH_TIMEOUT=100 bench_as "sampling_kernel_${m}" "$PWD" "$m" --quant int4 \
    --concurrency 1,8 --depths 1K --prefill "" --sampling greedy,qwen
done
