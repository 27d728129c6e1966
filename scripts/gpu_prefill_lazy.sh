#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): prefill attention with the lazy rescale (PrefillTile.lazy:
# the running max and the [128, 256] fp32 accumulator move only when a key block's scores pass the max by more
# than 8, base 2; sm_90 SASS per 32-key loop at the default tile: 456 instructions eager, 354 when the rescale is
# skipped, two barriers more for the block-wide test). Its GPU tests (bf16 / fp8 / int4, 8K and 2K over 30K), the
# kernel alone eager and lazy (`bench/attention_kernels.py --only prefill --lazy`, bf16 and fp8 KV), then the 27B
# int4 prefill of 128K with fp8 KV on the packaged tile (4,822 tok/s, 46% of the FLOP floor, 2026-12-04) and on
# the lazy one (bench/results/tiles/prefill-lazy-27b.json). Lands in $OUT/gpu_prefill_lazy.tgz.
set -uo pipefail
PACK=gpu_prefill_lazy; source "$(dirname "$0")/device_common.sh"
gpu_tests test_lazy 120 tests/gpu/test_norm_attention_kernels.py -k "prefill_lazy or test_prefill" || exit 0
for kv in bf16 fp8; do
  left 200 || break
  timeout 60 python bench/attention_kernels.py --only prefill --lazy --kv-dtype $kv --json "$R/attn_lazy_$kv.json" \
    > "$R/attn_lazy_$kv.txt" 2>&1
  echo "== kernel $kv rc=$? $((SECONDS - START)) s"; grep -E "^prefill" "$R/attn_lazy_$kv.txt"; pack
done
prefill() {  # prefill NAME [TILES]: 27B int4, fp8 KV, one 128K prompt
  ( [ -n "${2:-}" ] && export HINFER_TILES="$2"
    BENCH_TIMEOUT=90 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype fp8 --concurrency 1 --depths "" \
      --prefill 128K --prefill-repeats 1; grep -E "prefill" "$R/$1.txt" | tail -2 )
}
left 300 && prefill prefill_eager
left 400 && prefill prefill_lazy bench/results/tiles/prefill-lazy-27b.json
