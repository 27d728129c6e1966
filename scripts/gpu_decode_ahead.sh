#!/usr/bin/env bash
# One device call: plain decode run a step ahead (the next step queued, its input ids taken on the GPU, before the
# host reads the previous step's tokens) against reading every step first (--no-decode-ahead): the GPU identity
# test, int4 35B-A3B at 1 and 8 lanes each way, 27B bf16 at one lane three times (the 85%-of-floor line) and once
# without, int4 27B and 122B-A10B each way, and the 35B-A3B one-lane profile (its idle between steps was 0.3 ms).
# Everything lands in $OUT/gpu_decode_ahead.tgz.
set -uo pipefail
PACK=gpu_decode_ahead; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_engine_gpu.py \
  -k "decode_ahead or graph_decode_equals_eager" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head; pack
left 300 && decode_bench 35b_ahead qwen3.6-35b-a3b
left 380 && decode_bench 35b_sync qwen3.6-35b-a3b --no-decode-ahead
for run in 1 2 3; do
  left 460 && timeout 45 python -m hinfer bench qwen3.6-27b --concurrency 1 --depths 1K --prefill "" --out "$R" \
    > "$R/bf16_c1_ahead_$run.txt" 2>&1 && grep -E "decode C=" "$R/bf16_c1_ahead_$run.txt"
done
left 480 && timeout 45 python -m hinfer bench qwen3.6-27b --concurrency 1 --depths 1K --prefill "" --no-decode-ahead \
  --out "$R" > "$R/bf16_c1_sync.txt" 2>&1 && { echo "-- without:"; grep -E "decode C=" "$R/bf16_c1_sync.txt"; }
pack
left 440 && decode_bench 27b_ahead qwen3.6-27b
left 460 && decode_bench 27b_sync qwen3.6-27b --no-decode-ahead
left 440 && decode_bench 122b_ahead qwen3.5-122b-a10b
left 460 && decode_bench 122b_sync qwen3.5-122b-a10b --no-decode-ahead
