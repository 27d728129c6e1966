#!/usr/bin/env bash
# One device call: each norm in its consumer's launch (launch fusions off by default until this measures them):
# `norm_linear`, a MoE layer's router in its residual-add + RMSNorm launch, and `norm_project`, the add + norm in a
# bf16 or fp8 input projection's launch (the mixer's and the dense MLP's). Their GPU tests at the real shapes, then
# int4 35B-A3B and 122B-A10B (norm_linear), 27B bf16 and fp8 (norm_project) at one lane, twice each way (the comma
# list turns the named fusions on at any rows, so slot_sum, tail and gate are named too: at one lane that is the
# default). Everything lands in $OUT/gpu_norm_fusions.tgz.
set -uo pipefail
PACK=gpu_norm_fusions; source "$(dirname "$0")/device_common.sh"
FUSED=slot_sum,tail,gate,norm_linear,norm_project
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  tests/gpu/test_engine_gpu.py -k "router_in_the_norm_launch or norms_in_their_consumers" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norm_linear|norms fused|^(FAILED|E )" "$R/tests.txt" | head -12
pack
run() {  # run NAME MODEL [ARGS...] FUSE
  local name=$1 model=$2 fuse=${@: -1}
  set -- "${@:3:$(($# - 3))}"
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$model" --concurrency 1 --depths 1K --prefill "" \
    --out "$R" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt")"
}
# one pair per model first, then a second round while the call lasts
for i in 1 2; do
  for c in "35b qwen3.6-35b-a3b --quant int4" "27b_bf16 qwen3.6-27b" "27b_fp8 qwen3.6-27b --quant fp8" \
           "122b qwen3.5-122b-a10b --quant int4"; do
    set -- $c; name=$1; shift
    left 440 && run "${name}_default_$i" "$@" 1
    left 460 && run "${name}_fused_$i" "$@" "$FUSED"
  done
  pack
done
