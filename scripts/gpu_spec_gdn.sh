#!/usr/bin/env bash
# One device call (carry .kcache and .whl): the 27B's MTP rounds (int4, K = 3, one and eight lanes) with the fused
# GDN step at verification's K + 1 rows (HINFER_GDN_FUSED=4) against the unfused kernels there (=1), alternated
# twice; first the speculative server again (drafter never right; the head skipped by passes that only feed it,
# top five logprobs where greedy answers part). Lands in $OUT/gpu_spec_gdn.tgz.
set -uo pipefail
PACK=gpu_spec_gdn; source "$(dirname "$0")/device_common.sh"
spec() {  # NAME [env...]
  local name=$1; shift
  env "$@" timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"; grep -E "decode C=|spec K=|round" "$R/$name.txt" | head -8
  pack
}
server_wheels
spec_serving 300
left 420 && spec gdn_fused_1_a HINFER_GDN_FUSED=1
left 440 && spec gdn_fused_4_a HINFER_GDN_FUSED=4
left 460 && spec gdn_fused_1_b HINFER_GDN_FUSED=1
left 480 && spec gdn_fused_4_b HINFER_GDN_FUSED=4
