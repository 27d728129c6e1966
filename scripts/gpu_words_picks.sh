#!/usr/bin/env bash
# One device call (about five and a half minutes, carry .kcache) for a short budget: the 35B-A3B's sampled MTP rounds
# judged on the device (scripts/gpu_spec_picks.sh's first line), then scripts/gpu_fp8_words.sh cut to fit (its tests,
# the one-row sweep of the fp8 GEMV's two forms, one bench of each), then the 27B's sampled rounds if time is left.
# Lands in $OUT/gpu_words_picks.tgz.
set -uo pipefail
PACK=gpu_words_picks; source "$(dirname "$0")/device_common.sh"
spec() { BENCH_TIMEOUT=60 bench_as "spec_picks_$1" "$PWD" "$1" --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
  --depths 1K --prefill "" --steps 64 --sampling greedy,qwen; }
spec qwen3.6-35b-a3b
timeout 60 python -m pytest -q -p no:cacheprovider tests/quant/test_kernels.py -k "words or skinny" > "$R/test_words.txt" 2>&1
echo "== test_words rc=$? $((SECONDS - START)) s"; tail -2 "$R/test_words.txt"; pack
timeout 170 python bench/linear_kernels.py --tune --formats fp8 --ms 1 --shapes gate_up,down,qkv,gdn_in,o_proj \
  --tuned-out "$R/tiles-fp8-m1.json" > "$R/tune_fp8_m1.txt" 2>&1
echo "== tune rc=$? $((SECONDS - START)) s"; grep -E "words|codes|best" "$R/tune_fp8_m1.txt"; pack
if [ -s "$R/tiles-fp8-m1.json" ]; then
  for arm in packaged words; do
    left 330 || break
    tiles=""; [ $arm = words ] && tiles="$R/tiles-fp8-m1.json"
    HINFER_TILES=$tiles BENCH_TIMEOUT=60 bench_as "fp8_${arm}" "$PWD" qwen3.6-27b --quant fp8 --concurrency 1 \
      --depths 1K --prefill ""
  done
fi
left 300 && spec qwen3.6-27b
left 320 && gpu_tests test_picks 60 tests/gpu/test_engine_gpu.py -k "sampled_lanes_judged"
