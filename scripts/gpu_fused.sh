#!/usr/bin/env bash
# One device call for the fused Gated DeltaNet step (conv + gates + rule + output norm in one kernel), the one-max MoE router and
# the int4 experts taking SiLU-mul as they load (engine tests included: all three are on the model path):
# their GPU tests, the GDN kernel micro-benchmark (fused beside the three kernels), then 27B and 35B-A3B int4
# decode with the fused step off and on (HINFER_GDN_FUSED=0 / 1).
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.txt" 2>&1
timeout 240 python -m pytest -q -s tests/gpu/test_gdn_kernels.py tests/gpu/test_moe_kernels.py tests/gpu/test_engine_gpu.py -m gpu \
  -p no:cacheprovider > "$OUT/test_fused.txt" 2>&1
echo "== tests rc=$? $(grep -E 'passed|failed' "$OUT/test_fused.txt" | tail -1)"
grep -E "^(FAILED|E )|fused gdn" "$OUT/test_fused.txt" | head -20
timeout 100 python bench/gdn_kernels.py > "$OUT/gdn_kernels.txt" 2>&1
echo "== gdn bench rc=$?"; grep -E "decode|verify|settings" "$OUT/gdn_kernels.txt" | head -20
for model in qwen3.6-27b qwen3.6-35b-a3b; do
  for fused in 0 1; do
    HINFER_GDN_FUSED=$fused timeout 110 python -m hinfer bench $model --quant int4 --concurrency 1,8 \
      --depths 1K --prefill "" --out "$OUT" > "$OUT/bench_${model}_int4_fused$fused.txt" 2>&1
    echo "== $model fused=$fused rc=$?"; grep -E "decode C=" "$OUT/bench_${model}_int4_fused$fused.txt" | tail -2
  done
done
