#!/usr/bin/env bash
# One device call that sorts out the launch fusions: the fused router's GPU test with its error, the int4 tail /
# GLU and gated-attention tests, a per-kernel profile of a 35B-A3B int4 step at 8 lanes with the fusions on and
# off, decode with each fusion alone (HINFER_FUSE_LAUNCHES=<name>) on the 35B-A3B and the 27B, then the engine
# tests. Steps past 520 s are skipped (the call's limit is 600). Everything lands in $OUT/gpu_fusions.tgz.
set -uo pipefail
OUT="${OUT:-/tmp/hinfer-out}"; mkdir -p "$OUT/r"; R="$OUT/r"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
START=$SECONDS; left() { [ $((SECONDS - START)) -lt "${1:-520}" ]; }
pack() { tar czf "$OUT/gpu_fusions.tgz" -C "$R" .; }
bench() {  # name model fusions concurrency
  HINFER_FUSE_LAUNCHES=$3 timeout 80 python -m hinfer bench "$2" --quant int4 --concurrency "$4" --depths 1K \
    --prefill "" --out "$R" > "$R/bench_$1.txt" 2>&1
  echo "== $1 ($2, fusions $3) rc=$?"; grep -E "decode C=" "$R/bench_$1.txt"
}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/env.txt" 2>&1
timeout 100 python -m pytest -q tests/gpu/test_moe_kernels.py -m gpu -k "router" -x --tb=short \
  -p no:cacheprovider > "$R/tests_router.txt" 2>&1
echo "== router tests rc=$? $(tail -1 "$R/tests_router.txt")"; grep -E "^(FAILED|E )|Error" "$R/tests_router.txt" | head -20
timeout 80 python -m pytest -q tests/gpu/test_int4_mma.py tests/gpu/test_norm_attention_kernels.py -m gpu \
  -k "tail or silu_mul or gated" -p no:cacheprovider > "$R/tests_int4.txt" 2>&1
echo "== int4 tail / GLU, gated attention tests rc=$? $(tail -1 "$R/tests_int4.txt")"; grep -E "^(FAILED|E )" "$R/tests_int4.txt" | head -8
pack
for f in 1 0; do
  left 400 || break
  HINFER_FUSE_LAUNCHES=$f timeout 90 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --lanes 8 \
    > "$R/profile_35b_f$f.txt" 2>&1
  echo "== profile 35B 8 lanes fusions $f rc=$?"; grep -vE "INFO|WARN|^\s*$" "$R/profile_35b_f$f.txt" | head -30
done
pack
for f in router slot_sum; do left 460 && bench "35b_$f" qwen3.6-35b-a3b "$f" 1,8; done
pack
for f in 1 0 tail glu gate; do left 500 && bench "27b_$f" qwen3.6-27b "$f" 1,8; done
pack
left 440 && timeout 150 python -m pytest -q -x tests/gpu/test_engine_gpu.py -m gpu --tb=short -p no:cacheprovider \
  > "$R/tests_engine.txt" 2>&1
echo "== engine tests rc=$? $(tail -1 "$R/tests_engine.txt")"; grep -E "^(FAILED|E )" "$R/tests_engine.txt" | head -8
pack
