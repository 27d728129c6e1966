#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): where a speculative round with sampled lanes goes. On an H100
# (2026-12-05) a 35B-A3B round at K = 3 took 12.81 ms with every lane sampling the Qwen defaults against 4.67 ms
# greedy. The round's kernels and GPU gaps and the host's Python time by function (`--host`), sampled beside greedy,
# one lane; then the 27B at eight lanes sampled. Lands in $OUT/gpu_spec_sampling_profile.tgz.
set -uo pipefail
PACK=gpu_spec_sampling_profile; source "$(dirname "$0")/device_common.sh"
prof() {  # prof NAME CONFIG LANES SAMPLING [ARGS...]
  left 420 || return 0
  timeout 110 python bench/profile_decode.py --config "$2" --quant int4 --spec-k 3 --lanes "$3" --pdl \
    --sampling "$4" "${@:5}" > "$R/$1.txt" 2>&1
  echo "== $1 rc=$? $((SECONDS - START)) s"; head -12 "$R/$1.txt"
  pack
}
prof spec_qwen_35b_c1 qwen3.6-35b-a3b 1 qwen --host
prof spec_greedy_35b_c1 qwen3.6-35b-a3b 1 greedy
prof spec_qwen_27b_c8 qwen3.6-27b 8 qwen --host
