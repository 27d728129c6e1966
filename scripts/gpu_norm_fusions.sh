#!/usr/bin/env bash
# One device call: each norm in its consumer's launch (launch fusions off by default until this measures them):
# `norm_linear`, a MoE layer's router in its residual-add + RMSNorm launch, and `norm_project`, the add + norm in a
# bf16 input projection's launch (the mixer's and the dense MLP's). Their GPU tests at the real shapes, then int4
# 35B-A3B and 122B-A10B (norm_linear) and 27B bf16 (norm_project) decode at one lane, twice each way (the comma
# list turns the named fusions on at any rows, so slot_sum, tail and gate are named too: at one lane that is the
# default). Everything lands in $OUT/gpu_norm_fusions.tgz.
set -uo pipefail
PACK=gpu_norm_fusions; source "$(dirname "$0")/device_common.sh"
FUSED=slot_sum,tail,gate,norm_linear,norm_project
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  tests/gpu/test_engine_gpu.py -k "router_in_the_norm_launch or norms_in_their_consumers" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norm_linear|norms fused|^(FAILED|E )" "$R/tests.txt" | head -12
pack
run() {  # run NAME MODEL FUSE [ARGS...]
  local name=$1 model=$2 fuse=$3; shift 3
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$model" --concurrency 1 --depths 1K --prefill "" \
    --out "$R" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt")"
}
for m in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  for i in 1 2; do
    left 430 && run "${m}_default_$i" "$m" 1 --quant int4
    left 450 && run "${m}_fused_$i" "$m" "$FUSED" --quant int4
  done
  pack
done
for i in 1 2; do
  left 480 && run "27b_bf16_default_$i" qwen3.6-27b 1
  left 500 && run "27b_bf16_fused_$i" qwen3.6-27b "$FUSED"
done
pack
