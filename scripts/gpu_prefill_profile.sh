#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): where an 8K prefill goes (bench/profile_prefill.py: the
# kernels by kind, beside the prompt's FLOP floor), 27B fp8 (15,202 tok/s on 2026-12-01; the line 17,000) and int4
# with its default dequantizing prefill and with HINFER_INT4_PREFILL=fp8 (10.6K / 15.0K; the line 15,000 exact),
# then fp8 again with prefill attention on Triton (cuDNN takes the full chunks by default). Lands in
# $OUT/gpu_prefill_profile.tgz.
set -uo pipefail
PACK=gpu_prefill_profile; source "$(dirname "$0")/device_common.sh"
profile() {  # profile NAME QUANT [ENV=VALUE...]
  local name=$1 quant=$2; shift 2
  env "$@" timeout 110 python bench/profile_prefill.py --quant "$quant" --prompt 8192 --chunk 8192 \
    > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; sed -n '/^prefill/,/^$/p' "$R/$name.txt"; pack
}
left 60 && profile prefill_fp8 fp8
left 170 && profile prefill_int4 int4
left 280 && profile prefill_int4_fp8 int4 HINFER_INT4_PREFILL=fp8
left 390 && profile prefill_fp8_triton fp8 HINFER_PREFILL_CUDNN=0
