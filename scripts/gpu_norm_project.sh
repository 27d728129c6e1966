#!/usr/bin/env bash
# One device call: the residual add + RMSNorm in a bf16 or fp8 input projection's launch (`norm_project`), now in
# the product's one pass over K (the rows' rstd scales the product at the end; its first form, a prologue pass
# over K before the product, cost 16-19%). GPU tests at the real shapes, then 27B bf16 and fp8 at 1 and 8 lanes
# each way (each lane count against the fusions its default takes there), twice. Everything lands in
# $OUT/gpu_norm_project.tgz.
set -uo pipefail
PACK=gpu_norm_project; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_linear_kernels.py \
  tests/gpu/test_engine_gpu.py -k "norm_in_the_projection_launch or norms_in_their_consumers" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norms fused|^(FAILED|E )" "$R/tests.txt" | head -12
pack
run() {  # run NAME FUSE MODEL [ARGS...]
  local name=$1 fuse=$2; shift 2
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$@" --depths 1K --prefill "" --out "$R" \
    > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt" | sed 's/.*decode/decode/')"
}
for i in 1 2; do
  for q in bf16 fp8; do
    left 440 && run "${q}_c1_default_$i" slot_sum,tail,gate,norm_linear qwen3.6-27b --quant $q --concurrency 1
    left 460 && run "${q}_c1_project_$i" slot_sum,tail,gate,norm_linear,norm_project qwen3.6-27b --quant $q \
      --concurrency 1
    left 480 && run "${q}_c8_default_$i" gate,norm_linear qwen3.6-27b --quant $q --concurrency 8
    left 500 && run "${q}_c8_project_$i" gate,norm_linear,norm_project qwen3.6-27b --quant $q --concurrency 8
    pack
  done
done
