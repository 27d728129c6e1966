#!/usr/bin/env bash
# One device call: the residual add + RMSNorm in an input projection's launch (`norm_project`) in the product's
# one pass over K (the rows' rstd scales the product at the end; its first form, a prologue pass over K before
# the product, cost 16-19%): bf16 / fp8 (skinny kernel) and int4 (tensor-core kernel, GDN tail rows beside). GPU
# tests at the real shapes, then 27B int4 / bf16 / fp8 and 35B-A3B int4 at 1 and 8 lanes each way (each lane count
# against the fusions its default takes there). Everything lands in $OUT/gpu_norm_project.tgz.
set -uo pipefail
PACK=gpu_norm_project; source "$(dirname "$0")/device_common.sh"
timeout 170 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_linear_kernels.py \
  tests/gpu/test_int4_mma.py tests/gpu/test_engine_gpu.py \
  -k "norm_in_the_projection_launch or norm_in_the_int4_launch or norms_in_their_consumers or norms_in_the_int4" \
  > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norms fused|^(FAILED|E )" "$R/tests.txt" | head -16
pack
run() {  # run NAME FUSE MODEL [ARGS...]
  local name=$1 fuse=$2; shift 2
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$@" --depths 1K --prefill "" --out "$R" \
    > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt" | sed 's/.*decode/decode/')"
}
for q in "27b_int4 qwen3.6-27b --quant int4" "35b_int4 qwen3.6-35b-a3b --quant int4" "27b_bf16 qwen3.6-27b" \
         "27b_fp8 qwen3.6-27b --quant fp8"; do
  set -- $q; name=$1; shift
  left 440 && run "${name}_c1_default" slot_sum,tail,gate,norm_linear "$@" --concurrency 1
  left 460 && run "${name}_c1_project" slot_sum,tail,gate,norm_linear,norm_project "$@" --concurrency 1
  left 480 && run "${name}_c8_default" gate,norm_linear "$@" --concurrency 8
  left 500 && run "${name}_c8_project" gate,norm_linear,norm_project "$@" --concurrency 8
  pack
done
