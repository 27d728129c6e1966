#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache): the fp8 GEMV at one row reading its codes as 32-bit words and
# turning them into fp32 by their bits (SkinnyConfig.words) against the conversion instructions. The 27B fp8 at one
# lane spends 9.1 of its 9.9 ms step in that GEMV (2026-12-05, 51-83% of copy rate per shape). The kernel tests
# compiled (every e4m3 code exact), the sweep of both forms at one row on the 27B shapes (`--tune --formats fp8
# --ms 1`: each form's best per shape printed, the winners to $R/tiles-fp8-m1.json), then the 27B fp8 at one lane on
# the packaged tiles and on the winners, alternated. Lands in $OUT/gpu_fp8_words.tgz.
set -uo pipefail
PACK=gpu_fp8_words; source "$(dirname "$0")/device_common.sh"
timeout 120 python -m pytest -q -p no:cacheprovider tests/quant/test_kernels.py -k "words or skinny" \
  > "$R/test_words.txt" 2>&1
echo "== test_words rc=$? $((SECONDS - START)) s"; tail -3 "$R/test_words.txt"; pack
timeout 200 python bench/linear_kernels.py --tune --formats fp8 --ms 1 --shapes qkv,gdn_in,gate_up,o_proj,down \
  --tuned-out "$R/tiles-fp8-m1.json" > "$R/tune_fp8_m1.txt" 2>&1
echo "== tune rc=$? $((SECONDS - START)) s"; grep -E "words|codes|best" "$R/tune_fp8_m1.txt"; pack
[ -s "$R/tiles-fp8-m1.json" ] || exit 0
for arm in packaged words packaged words; do
  left 330 || break
  tiles=""; [ $arm = words ] && tiles="$R/tiles-fp8-m1.json"
  HINFER_TILES=$tiles BENCH_TIMEOUT=70 bench_as "bench_${arm}_$((SECONDS - START))" "$PWD" qwen3.6-27b --quant fp8 \
    --concurrency 1 --depths 1K --prefill ""
done
# the official FP8 checkpoints' layout (128x128 block scales): its one-row sweep, both forms
left 420 && timeout 120 python bench/linear_kernels.py --tune --formats fp8-block --ms 1 \
  --shapes qkv,gdn_in,gate_up,o_proj,down --tuned-out "$R/tiles-fp8-block-m1.json" > "$R/tune_fp8_block_m1.txt" 2>&1
echo "== tune block $((SECONDS - START)) s"; grep -E "words|codes" "$R/tune_fp8_block_m1.txt"; pack
