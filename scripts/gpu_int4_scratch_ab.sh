#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the int4 prefill scratch writers end to end, interleaved
# pairs (the 27B int4 8K prefill; at 18:33 UTC fp8 14,968 -> 15,074 tok/s with the coalesced writer, one run
# each; the kernels alone: the four 27B shapes' bf16 scratch 427 -> 396 us, fp8 rows 406 -> 380): dequant and
# fp8, gather / coalesced, twice. Then the 35B-A3B's int4 decode at one and eight lanes x 128K with bf16 KV on
# its packaged decode tiles (the kernel alone 123 -> 89 us at one lane x 128K). Lands in $OUT/gpu_int4_scratch_ab.tgz.
set -uo pipefail
PACK=gpu_int4_scratch_ab; source "$(dirname "$0")/device_common.sh"
for rep in 1 2; do
  for mode in dequant:gather dequant:coalesced fp8:gather fp8:coalesced; do
    left 250 || break
    HINFER_INT4_DEQUANT=${mode#*:} HINFER_INT4_PREFILL=${mode%%:*} timeout 60 python -m hinfer bench qwen3.6-27b \
      --quant int4 --concurrency 1 --depths "" --prefill 8K --out "$R" > "$R/prefill_${mode/:/_}_$rep.txt" 2>&1
    echo "== prefill $mode rc=$? $((SECONDS - START)) s"; grep -E "^\| prefill" "$R/prefill_${mode/:/_}_$rep.txt" | tail -1
    pack
  done
done
left 300 && BENCH_TIMEOUT=70 bench_as moe_bf16_128k "$PWD" qwen3.6-35b-a3b --quant int4 --kv-dtype bf16 \
  --concurrency 1,8 --depths 128K --prefill ""
