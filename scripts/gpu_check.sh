#!/usr/bin/env bash
# One device call: environment, GPU tests, kernel micro-benchmarks, and `hinfer bench`. Logs go to $OUT.
# Usage: bash scripts/gpu_check.sh [quick|tests|bench|full]   (HINFER_COMMIT=<sha> names the commit measured)
set -uo pipefail
MODE="${1:-full}"
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
PY=python3
if [ -d .whl ]; then  # wheels carried for packages missing on the image
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv; $PY -c 'import torch,triton;print(torch.__version__, triton.__version__)'; } 2>&1 | tee "$OUT/env.log"

if [[ "$MODE" == quick || "$MODE" == tests || "$MODE" == full ]]; then
  for t in test_gdn_kernels test_norm_attention_kernels test_linear_kernels test_engine_gpu ${EXTRA_TESTS:-}; do
    timeout "${TEST_TIMEOUT:-150}" $PY -m pytest -q -s tests/gpu/$t.py -m gpu -p no:cacheprovider > "$OUT/$t.log" 2>&1
    echo "== $t: rc=$? $(grep -E '(passed|failed|error)' "$OUT/$t.log" | tail -1)"
  done
fi
if [[ "$MODE" == quick ]]; then
  timeout 200 $PY -m hinfer bench qwen3.6-27b --layers 8 --concurrency 1,8 --depths 1K,32K --prefill 8K --steps 16 \
    --out "$OUT" 2>&1 | tee "$OUT/bench_quick.log" | tail -15
fi
if [[ "$MODE" == bench || "$MODE" == full ]]; then
  for f in bench/gdn_kernels.py bench/attention_kernels.py bench/linear_kernels.py; do
    [ -f "$f" ] && timeout 120 $PY "$f" 2>&1 | tee "$OUT/$(basename "$f" .py).log" | tail -12
  done
  timeout 400 $PY -m hinfer bench qwen3.6-27b --vs-hf --out "$OUT" 2>&1 | tee "$OUT/bench_27b_bf16.log" | tail -25
fi
