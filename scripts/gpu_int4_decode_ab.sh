#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): with x staged in shared memory by default at one row, does the
# bf16 tensor-core kernel (linear_int4_mma) now beat the int8 one (linear_int4_a8, which already stages its
# quantized x and holds every 27B and 122B-A10B one-row projection's `int4_a8` entry)? One-lane decode with
# HINFER_INT4_DECODE=tuned (the entries) and bf16 (none), alternated, 27B then 122B-A10B. The 35B-A3B has no
# entry (its one-row projections are already the bf16 kernel's). Lands in $OUT/gpu_int4_decode_ab.tgz.
set -uo pipefail
PACK=gpu_int4_decode_ab; source "$(dirname "$0")/device_common.sh"
arm() { HINFER_INT4_DECODE="$3" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 1 --depths 1K \
  --prefill "" --steps 128; }
for round in a b; do
  for mode in tuned bf16; do left 300 && arm "27b_${mode}_$round" qwen3.6-27b $mode; done
done
for mode in tuned bf16; do left 420 && arm "122b_$mode" qwen3.5-122b-a10b $mode; done
