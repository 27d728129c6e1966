#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): two prefill attention forms, off in the packaged tiles.
# PrefillTile.lazy: the running max and the [128, 256] fp32 accumulator move only when a key block's scores pass
# the max by more than 8 (base 2); sm_90 SASS per 32-key loop at the default tile: 456 instructions eager, 354 when
# the rescale is skipped, plus a block-wide test of two barriers. PrefillTile.f16 (1-byte caches): queries, tiles
# and probabilities in fp16, fp8 converted natively (fp8 553 -> 462 instructions, int4 714 -> 623). The long
# prefills run the attention's MMA and its softmax one after the other, so their instructions are prefill time.
# Their GPU tests, the kernel alone in each form (bf16, fp8 and int4 KV), then the 27B int4 prefill of 128K with
# fp8 KV on the packaged tile (4,822 tok/s, 46% of the FLOP floor, 2026-12-04) and on the lazy, f16 and both
# tiles (bench/results/tiles/prefill-*-27b.json). Lands in $OUT/gpu_prefill_lazy.tgz.
set -uo pipefail
PACK=gpu_prefill_lazy; source "$(dirname "$0")/device_common.sh"
gpu_tests test_forms 150 tests/gpu/test_norm_attention_kernels.py -k "prefill_tile_forms or test_prefill" || exit 0
for kv in fp8 bf16 int4; do
  left 220 || break
  timeout 70 python bench/attention_kernels.py --only prefill --lazy --f16 --kv-dtype $kv \
    --json "$R/attn_forms_$kv.json" > "$R/attn_forms_$kv.txt" 2>&1
  echo "== kernel $kv rc=$? $((SECONDS - START)) s"; grep -E "^prefill" "$R/attn_forms_$kv.txt"; pack
done
prefill() {  # prefill NAME [TILES]: 27B int4, fp8 KV, one 128K prompt
  ( [ -n "${2:-}" ] && export HINFER_TILES="$2"
    BENCH_TIMEOUT=80 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype fp8 --concurrency 1 --depths "" \
      --prefill 128K --prefill-repeats 1; grep -E "prefill" "$R/$1.txt" | tail -2 )
}
left 250 && prefill prefill_eager
left 320 && prefill prefill_lazy_f16 bench/results/tiles/prefill-lazy-f16-27b.json
left 390 && prefill prefill_lazy bench/results/tiles/prefill-lazy-27b.json
left 460 && prefill prefill_f16 bench/results/tiles/prefill-f16-27b.json
