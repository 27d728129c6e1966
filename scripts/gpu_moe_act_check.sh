#!/usr/bin/env bash
# One device call after the gate_up started writing silu(gate) * up: the MoE kernel tests whole, the engine's
# quantized-layer and norm tests at the real shapes (35B-A3B int4 through the new path), 35B-A3B int4 decode with
# the packaged tiles and its MTP rounds (K = 3, verification through the same kernels). Lands in
# $OUT/gpu_moe_act_check.tgz.
set -uo pipefail
PACK=gpu_moe_act_check; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  > "$R/test_moe_kernels.txt" 2>&1
echo "== test_moe_kernels rc=$?"; grep -E "^(FAILED|E )" "$R/test_moe_kernels.txt" | head -8; pack
timeout 240 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_engine_gpu.py \
  -k "quantized_layers or router_in_the_norm_launch or spec_graphs" > "$R/test_engine_gpu.txt" 2>&1
echo "== test_engine_gpu rc=$?"; grep -E "rel-L2|^(FAILED|E )" "$R/test_engine_gpu.txt" | head -12; pack
left 330 && decode_bench 35b qwen3.6-35b-a3b
left 380 && { timeout 100 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 \
  --concurrency 1,8 --depths 1K --prefill "" --steps 64 --forced-acceptance 0.8 --out "$R" > "$R/35b_spec.txt" 2>&1
  echo "== 35b spec rc=$?"; grep -E "decode C=|spec|round" "$R/35b_spec.txt" | tail -8; pack; }
