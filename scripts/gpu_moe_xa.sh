#!/usr/bin/env bash
# One device call (about six minutes): the 35B-A3B's routed experts with x loaded ahead with the weights. Nsight
# Compute put the eight-token gate_up at 0.34 issued instructions a cycle a scheduler, 11.5% occupancy (255
# registers: 4 programs of 2 warps an SM) and 2.25 long-scoreboard stalls an instruction: each group's x was read
# from L2 just before its MMA. The experts' tiles at eight tokens swept with x ahead or not
# (bench/experts_mma_tiles.py --x-ahead 0,1), decode with the winners (HINFER_TILES) against the packaged tiles,
# alternated; then the one-token sweep (for the record: the one-token tiles carry a register cap the sweep
# does not try). Lands in $OUT/gpu_moe_xa.tgz.
set -uo pipefail
PACK=gpu_moe_xa; source "$(dirname "$0")/device_common.sh"
sweep() {
  timeout "$2" python bench/experts_mma_tiles.py --model 35b --t "$1" --splits 1 --x-ahead 0,1 \
    --tuned-out "$R/xa35-t$1.json" --json "$R/xa35-t$1-sweep.json" > "$R/sweep_xa35_t$1.txt" 2>&1
  echo "== sweep T=$1 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep_xa35_t$1.txt" | head -4; pack
}
sweep 8 "${XA_SWEEP_S:-200}"
one() { bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill ""; }
if [ -s "$R/xa35-t8.json" ]; then
  for run in packaged xa packaged xa; do
    left "${DECODE_UNTIL:-420}" || break
    if [ "$run" = packaged ]; then one "decode_$run"; else HINFER_TILES="$R/xa35-t8.json" one "decode_$run"; fi
  done
fi
[ "${T1:-1}" = 1 ] && left 400 && sweep 1 $((530 - (SECONDS - START)))
