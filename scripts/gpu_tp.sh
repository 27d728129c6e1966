#!/usr/bin/env bash
# Calls on a two-GPU kind (nvidia-h200-x2 or nvidia-h100-x2; carry .kcache): tensor parallelism's acceptance runs.
# Default (about nine minutes): the two-GPU test (captured decode graphs holding the all-reduces against eager
# decode), then the 122B-A10B at int4, one and eight lanes at depth 1K, over two ranks eagerly and with
# HINFER_TP_GRAPHS=1, and on one GPU, in the same call (each rank's floor, the step's all-reduces beside their
# bus-bandwidth floor). PART=397b (H200s: about 100 GB a rank): the 397B-A17B's plan, then its decode over two
# ranks, eagerly and with graphs. Lands in $OUT/gpu_tp.tgz.
set -uo pipefail
PACK=gpu_tp; source "$(dirname "$0")/device_common.sh"
nvidia-smi topo -m > "$R/topo.txt" 2>&1
tp_line() {  # tp_line NAME MODEL SECONDS [ARGS...] (ENV=VALUE before the call applies)
  local name=$1 model=$2 seconds=$3; shift 3
  left $((590 - seconds)) || return 1
  timeout "$seconds" python -m hinfer bench "$model" --quant int4 --concurrency 1,8 --depths 1K --prefill "" \
    --out "$R" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"
  grep -E "decode C=|all-reduces|ready" "$R/$name.txt" | sed -E 's/^.*INFO hinfer.(bench|tp): //'
  pack
}
if [ "${PART:-122b}" = 397b ]; then
  python -m hinfer plan qwen3.5-397b-a17b --weights int4 --tensor-parallel 2 --max-context 65536 \
    --max-concurrency 8 > "$R/plan_397b.txt" 2>&1; tail -4 "$R/plan_397b.txt"; pack
  tp_line tp2_397b qwen3.5-397b-a17b 260 --tensor-parallel 2
  HINFER_TP_GRAPHS=1 tp_line tp2_397b_graphs qwen3.5-397b-a17b 260 --tensor-parallel 2
  exit 0
fi
gpu_tests tp_graphs 150 tests/gpu/test_tensor_parallel_gpu.py
tp_line tp2_122b qwen3.5-122b-a10b 150 --tensor-parallel 2
HINFER_TP_GRAPHS=1 tp_line tp2_122b_graphs qwen3.5-122b-a10b 150 --tensor-parallel 2
tp_line tp1_122b qwen3.5-122b-a10b 100
