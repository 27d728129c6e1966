#!/usr/bin/env bash
# One device call for what is on the model path and ran on no GPU yet: the int4 experts with K split over
# programs and the down launch summing the slots, the MoE router in one launch, the int4 kernel's bf16 tail rows
# (GDN b / a) and SiLU-mul as it loads (the dense MLP's down), the attention gate at decode: their GPU tests and the engine tests, the experts
# tile sweep with splits (35B-A3B; MODELS=122b for the other), 35B-A3B int4 decode with the swept tiles and the
# launch fusions on / off (HINFER_FUSE_LAUNCHES), the 27B int4 decode and MTP rounds. Steps past 520 s are skipped (the call's limit is 600).
# Everything lands in $OUT/gpu_moe_split.tgz (the device returns a few files only).
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT/r"; R="$OUT/r"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
START=$SECONDS; left() { [ $((SECONDS - START)) -lt 520 ]; }
pack() { tar czf "$OUT/gpu_moe_split.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/env.txt" 2>&1
timeout 170 python -m pytest -q -s tests/gpu/test_moe_kernels.py tests/gpu/test_engine_gpu.py -m gpu \
  -p no:cacheprovider > "$R/tests.txt" 2>&1
echo "== moe + engine tests rc=$? $(grep -E 'passed|failed' "$R/tests.txt" | tail -1)"; grep -E "^(FAILED|E )" "$R/tests.txt" | head -12
timeout 70 python -m pytest -q tests/gpu/test_int4_mma.py tests/gpu/test_norm_attention_kernels.py -m gpu \
  -k "tail or silu_mul or gated" -p no:cacheprovider > "$R/tests_int4.txt" 2>&1
echo "== int4 tail / GLU, gated attention tests rc=$? $(tail -1 "$R/tests_int4.txt")"; grep -E "^(FAILED|E )" "$R/tests_int4.txt" | head -8
pack
timeout 150 python bench/experts_mma_tiles.py --model ${MODELS:-35b} --t 1 8 --splits 1,2,4 --json "$R/experts.json" \
  --tuned-out "$R/experts_tuned.json" > "$R/experts.txt" 2>&1
echo "== experts sweep rc=$?"; grep -E "^(35b|122b)" "$R/experts.txt"
T=bench/results/20261202-experts-mma-tiles-tuned.json
[ -s "$R/experts_tuned.json" ] && python - "$T" "$R/experts_tuned.json" "$R/tiles.json" <<'PY'
import json, sys
old, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
keys = {(e["family"], e["n"], e["k"], e["m"]) for e in new}
json.dump([e for e in old if (e["family"], e["n"], e["k"], e["m"]) not in keys] + new, open(sys.argv[3], "w"))
PY
[ -s "$R/tiles.json" ] && export HINFER_TILES="$R/tiles.json"
pack
for sum in 1 0; do
  left || break
  HINFER_FUSE_LAUNCHES=$sum timeout 70 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --concurrency 1,8 \
    --depths 1K --prefill "" --out "$R" > "$R/bench_35b_sum$sum.txt" 2>&1
  echo "== 35B launch fusions=$sum rc=$?"; grep -E "decode C=" "$R/bench_35b_sum$sum.txt"
done
unset HINFER_TILES
pack
left && timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
  --depths 1K --prefill "" --steps 64 --out "$R" > "$R/spec.txt" 2>&1
echo "== 27B int4 decode + spec rc=$?"; grep -E "decode C=|spec K=" "$R/spec.txt"
pack
