#!/usr/bin/env bash
# One device call: a MoE layer's router in its residual-add + RMSNorm launch (the `norm_linear` launch fusion,
# off by default until this measures it): the kernel's GPU test at the real shapes, then int4 35B-A3B and
# 122B-A10B decode at one lane with it and without (the comma list turns the named fusions on at any rows, so
# slot_sum and tail are named too: at one lane that is the default). Everything lands in $OUT/gpu_norm_router.tgz.
set -uo pipefail
PACK=gpu_norm_router; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  -k router_in_the_norm_launch > "$R/tests.txt" 2>&1
echo "== GPU test rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norm_linear|^(FAILED|E )" "$R/tests.txt" | head -12; pack
for m in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  for mode in default fused default2 fused2; do
    left 470 || break
    case $mode in fused*) f=slot_sum,tail,gate,norm_linear ;; *) f=1 ;; esac
    HINFER_FUSE_LAUNCHES=$f timeout 80 python -m hinfer bench "$m" --quant int4 --concurrency 1 --depths 1K \
      --prefill "" --out "$R" > "$R/${m}_$mode.txt" 2>&1
    echo "== $m $mode rc=$? $(grep -E 'decode C=' "$R/${m}_$mode.txt")"
  done
  pack
done
