#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): MTP rounds with sampled lanes, the server's default now
# (the checkpoint's temperature 1, top_k 20, top_p 0.95 for fields a request leaves out). A sampled lane drafts from
# the head's processed distribution and is judged by rejection sampling over whole vocabulary rows; every
# speculative figure so far is greedy. The 27B and the 35B-A3B at int4, K = 3, one and eight lanes, depth 1K, greedy
# beside qwen (measured on an H100 2026-12-05: bench/RESULTS.md), then the sampled lanes drafting the head's argmax
# (--spec-draft argmax). Lands in $OUT/gpu_spec_sampling.tgz.
set -uo pipefail
PACK=gpu_spec_sampling; source "$(dirname "$0")/device_common.sh"
for m in qwen3.6-27b qwen3.6-35b-a3b; do
  left 300 || break
  BENCH_TIMEOUT=150 bench_as "spec_sampling_${m}" "$PWD" "$m" --quant int4 --spec mtp \
    --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64 --sampling greedy,qwen
done
# sampled lanes drafting the head's argmax (--spec-draft argmax): their draft steps as greedy lanes run them
for m in qwen3.6-35b-a3b qwen3.6-27b; do
  left 450 || break
  BENCH_TIMEOUT=120 bench_as "spec_sampling_argmax_${m}" "$PWD" "$m" --quant int4 --spec mtp --spec-draft argmax \
    --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64 --sampling qwen
done
