#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the attention tile forms side by side in one process.
# Words (DecodeTile.words / PrefillTile.words: 1-byte tiles read a 32-bit word at a time, two values an
# instruction; fewer sm_90 instructions, one more pass of shared memory): on by default at 18:15 UTC they lost in
# the f16 form (kernel alone, one lane x 128K: fp8 102 -> 113 us, int4 156 -> 252) and won for k8v4 at eight lanes
# (1,198 -> 1,019 us); now a tile option, off, each format's A/B in one process (--words toggles it).
# Prefill: PrefillTile.lazy (the running max and the [128, 256] fp32 accumulator move only when a key block's
# scores pass the max by more than 8, base 2) and PrefillTile.f16 (1-byte caches: dots in fp16), the kernel alone
# in each form, then the 27B int4 prefill of 128K with fp8 KV on the packaged tile (4,822 tok/s, 46% of the FLOP
# floor) and on the lazy + f16, lazy and f16 tiles (bench/results/tiles/prefill-*-27b.json).
# Lands in $OUT/gpu_kv_forms.tgz.
set -uo pipefail
PACK=gpu_kv_forms; source "$(dirname "$0")/device_common.sh"
gpu_tests test_forms 200 tests/gpu/test_norm_attention_kernels.py \
  -k "${TESTS_K:-tile_forms or test_prefill or int4_words or byte_words}" || exit 0
for kv in k8v4 int4 fp8 int8; do
  left 200 || break
  timeout 45 python bench/attention_kernels.py --only decode --words --kv-dtype $kv --decode-case 1,131072,1 \
    --decode-case 8,131072,1 --decode-case 8,32768,4 --json "$R/dec_words_$kv.json" > "$R/dec_words_$kv.txt" 2>&1
  echo "== decode $kv rc=$? $((SECONDS - START)) s"; grep -E "^decode" "$R/dec_words_$kv.txt"; pack
done
for kv in fp8 int4 bf16; do
  left 260 || break
  w=$([ $kv = bf16 ] || echo --words)
  timeout 90 python bench/attention_kernels.py --only prefill --lazy --f16 $w --kv-dtype $kv \
    --json "$R/attn_forms_$kv.json" > "$R/attn_forms_$kv.txt" 2>&1
  echo "== prefill $kv rc=$? $((SECONDS - START)) s"; grep -E "^prefill" "$R/attn_forms_$kv.txt"; pack
done
prefill() {  # prefill NAME [TILES]: 27B int4, fp8 KV, one 128K prompt
  ( [ -n "${2:-}" ] && export HINFER_TILES="$2"
    BENCH_TIMEOUT=80 bench_as "$1" "$PWD" qwen3.6-27b --quant int4 --kv-dtype fp8 --concurrency 1 --depths "" \
      --prefill 128K --prefill-repeats 1; grep -E "prefill" "$R/$1.txt" | tail -2 )
}
left 330 && prefill prefill_eager
left 410 && prefill prefill_lazy_f16 bench/results/tiles/prefill-lazy-f16-27b.json
left 490 && prefill prefill_lazy bench/results/tiles/prefill-lazy-27b.json
