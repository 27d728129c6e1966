#!/usr/bin/env bash
# One device call for what the last CPU session built and could not run (bench/RESULTS.md, "Not yet measured"):
# the new GPU tests (GDN state saved inside a chunk, the int4 L2 prefetch, the experts at 32 tokens), turn 2 at 32K
# with the in-step save built once per step, 27B int4 decode with the L2 prefetch at 0 and 8 groups, the wgmma
# sweep at one and two rows, and the MTP rounds with a 32K draft vocabulary. Steps past their time guard are
# skipped; everything lands in $OUT/gpu_next.tgz.
set -uo pipefail
PACK=gpu_next; source "$(dirname "$0")/device_common.sh"
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_gdn_kernels.py \
  tests/gpu/test_int4_mma.py tests/gpu/test_moe_kernels.py -k "saved_inside_a_chunk or l2_prefetch or (experts_int4_real_shapes and 32)" \
  > "$R/tests.txt" 2>&1
echo "== new GPU tests rc=$? $(grep -E 'passed|failed' "$R/tests.txt" | tail -1)"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
pack
if left 150; then
  timeout 110 python bench/profile_ttft.py --config qwen3.6-27b --history 32768 --new 200 > "$R/profile_ttft.txt" 2>&1
  echo "== turn 2 at 32K rc=$?"; head -3 "$R/profile_ttft.txt" | cut -c1-300; grep -A12 "^host ops" "$R/profile_ttft.txt"
  pack
fi
for p in 0 8; do
  left 330 || break
  HINFER_INT4_L2_PREFETCH=$p decode_bench "bench_27b_prefetch$p" qwen3.6-27b
done
if left 400; then
  timeout 100 python bench/int4_wgmma.py --ms 1,2 --json "$R/int4_wgmma_m12.json" --tiles "$R/wgmma_tiles_m12.json" \
    > "$R/int4_wgmma_m12.txt" 2>&1
  echo "== wgmma vs mma.sync at 1-2 rows rc=$?"; grep -E "^[a-z_]+ +M=|^    \(" "$R/int4_wgmma_m12.txt" | sed 's/SkinnyConfig([^)]*)//g'
  pack
fi
if left 480; then
  timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 --spec-draft-vocab 32768 --out "$R" > "$R/bench_27b_spec_vocab32k.txt" 2>&1
  echo "== 27B int4 MTP rounds, 32K draft vocabulary rc=$?"; grep -E "spec K=" "$R/bench_27b_spec_vocab32k.txt"
  pack
fi
if left 540; then
  timeout 50 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 > "$R/profile_spec_c1.txt" 2>&1
  echo "== spec round profile rc=$?"; grep -A8 "GPU idle" "$R/profile_spec_c1.txt"
  pack
fi
