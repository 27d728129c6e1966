#!/usr/bin/env bash
# One device call for the MoE router in one launch (hinfer/ops/triton/moe_router.py, Gluon; off by default
# until measured): its GPU test, then 35B-A3B and 122B-A10B int4 decode with it (HINFER_FUSE_LAUNCHES=router,gate)
# and without (gate alone; the slot sum and the tail rows off in both). Everything lands in $OUT/gpu_router.tgz.
set -uo pipefail
PACK=gpu_router; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s tests/gpu/test_moe_kernels.py -m gpu -k router --tb=short -p no:cacheprovider \
  > "$R/tests.txt" 2>&1
echo "== router tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
pack
for model in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  for f in gate router,gate; do
    left 480 || break
    HINFER_FUSE_LAUNCHES=$f timeout 120 python -m hinfer bench $model --quant int4 --concurrency 1,8 --depths 1K \
      --prefill "" --out "$R" > "$R/bench_${model}_${f/,/-}.txt" 2>&1
    echo "== $model fusions $f rc=$?"; grep -E "decode C=" "$R/bench_${model}_${f/,/-}.txt"
    pack
  done
done
