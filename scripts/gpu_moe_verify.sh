#!/usr/bin/env bash
# One device call: the int4 experts at speculative verification sizes on the tensor-core kernel (HINFER_MOE_MMA_PAIRS
# raised past its 72-pair default) against the grouped Triton kernels: the GPU test at 32 tokens, then 35B-A3B and
# 122B-A10B MTP rounds (K = 3, 1 and 8 lanes) with each, then 35B-A3B's rounds with the MTP head in int4 too
# (`--quant int4-mtp`: its MoE layer's experts then take the int4 kernels instead of the bf16 grouped ones).
# Everything lands in $OUT/gpu_moe_verify.tgz.
set -uo pipefail
PACK=gpu_moe_verify; source "$(dirname "$0")/device_common.sh"
timeout 200 python -m pytest -q -s tests/gpu/test_moe_kernels.py -m gpu -k "experts_int4_real_shapes and 32" --tb=short \
  -p no:cacheprovider > "$R/tests.txt" 2>&1
echo "== experts at 32 tokens rc=$? $(grep -E 'passed|failed' "$R/tests.txt" | tail -1)"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
pack
for model in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  for pairs in 72 288; do
    left 470 || break
    HINFER_MOE_MMA_PAIRS=$pairs timeout 120 python -m hinfer bench $model --quant int4 --spec mtp --spec-k 3 \
      --concurrency 1,8 --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_${model}_pairs$pairs.txt" 2>&1
    echo "== $model MTP rounds, tensor-core experts up to $pairs pairs rc=$?"; grep -E "spec K=" "$R/bench_${model}_pairs$pairs.txt"
    pack
  done
done
if left 480; then
  timeout 110 python -m hinfer bench qwen3.6-35b-a3b --quant int4-mtp --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_35b_int4_mtp.txt" 2>&1
  echo "== 35B-A3B int4-mtp MTP rounds rc=$?"; grep -E "spec K=" "$R/bench_35b_int4_mtp.txt"
  pack
fi
