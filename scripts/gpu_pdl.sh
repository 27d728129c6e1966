#!/usr/bin/env bash
# One device call for programmatic dependent launch (on by default; HINFER_PDL=0 turns it off: the int4 tensor-core matmuls, the RMS norms and
# the MoE decode kernels start while their predecessor drains, the first two reading weights before they wait): bit-equality in a CUDA graph, the GPU
# engine tests with it on, then decode with it off and on, 27B int4 and 35B-A3B int4 at 1 and 8 lanes.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
timeout 120 python -m pytest -q tests/gpu/test_pdl.py -m gpu -p no:cacheprovider > "$OUT/test_pdl.log" 2>&1
echo "== test_pdl rc=$? $(tail -1 "$OUT/test_pdl.log")"; grep -E "^(FAILED|E )" "$OUT/test_pdl.log" | head
HINFER_PDL=1 timeout 180 python -m pytest -q tests/gpu/test_engine_gpu.py -m gpu -p no:cacheprovider \
  > "$OUT/test_engine_pdl.log" 2>&1
echo "== engine tests with PDL rc=$? $(tail -1 "$OUT/test_engine_pdl.log")"
for model in qwen3.6-27b qwen3.6-35b-a3b; do
  for pdl in 0 1; do
    HINFER_PDL=$pdl timeout 110 python -m hinfer bench $model --quant int4 --concurrency 1,8 --depths 1K \
      --prefill "" --out "$OUT" > "$OUT/bench_${model}_int4_pdl$pdl.log" 2>&1
    echo "== $model PDL=$pdl rc=$?"; grep -E "tok/s" "$OUT/bench_${model}_int4_pdl$pdl.log" | tail -2
  done
done
