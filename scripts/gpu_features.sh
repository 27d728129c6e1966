#!/usr/bin/env bash
# One device call (under eight minutes, carry .kcache and .whl): the feature benches never yet run on a GPU.
# Structured output's decode overhead at eight lanes (27B bf16, every / half / no lane on a JSON schema; xgrammar
# from .whl), then the vision tower's time per image and the first-token time of a one-image prompt (27B shapes,
# bf16, then int4 as the budget allows; VISION_QUANTS= skips them). Lands in $OUT/gpu_features.tgz.
set -uo pipefail
PACK=gpu_features; source "$(dirname "$0")/device_common.sh"
server_wheels
python -c 'import xgrammar' 2> /dev/null || echo "xgrammar missing: carry .whl"
timeout "${STRUCTURED_S:-220}" python -m hinfer bench qwen3.6-27b --structured --out "$R" > "$R/bench_27b_structured.txt" 2>&1
echo "== structured rc=$? $((SECONDS - START)) s"; grep -vE "DEBUG" "$R/bench_27b_structured.txt" | tail -14; pack
for q in ${VISION_QUANTS-bf16 int4}; do
  left 300 || break
  timeout $((440 - (SECONDS - START))) python -m hinfer bench qwen3.6-27b --vision --quant $q --out "$R" \
    > "$R/bench_27b_vision_$q.txt" 2>&1
  echo "== vision $q rc=$? $((SECONDS - START)) s"; grep -vE "DEBUG" "$R/bench_27b_vision_$q.txt" | tail -14; pack
done
