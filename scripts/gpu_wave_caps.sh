#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache; the 122B-A10B at fp8 only on an H200): experts launches whose
# programs run one wave past a whole one (`python bench/waves.py --experts MODEL --fmt FMT`, their sm_90 builds),
# each held to 96 registers so that 5 (4-warp) or 10 (2-warp) programs fit an SM:
# - two tokens, int4: the 35B-A3B's down and the 122B-A10B's gate_up, 1,152 programs of 2 warps at 120-125
#   registers, 8 an SM (1,056 slots); under 96, 1,320 (0-8 bytes of stack). Three tokens stay two waves.
# - one and two tokens, fp8, the 122B-A10B's gate_up (its heuristic tile): 576 programs of 4 warps at 98-112
#   registers, 4 an SM (528); under 96, 660 (8-16 bytes).
# Decode at the lane counts they serve, the packaged tiles against the entries capped (HINFER_TILES), alternated.
# Lands in $OUT/gpu_wave_caps.tgz.
set -uo pipefail
PACK=gpu_wave_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
python - "$R" <<'PY'
import pathlib, sys
from dataclasses import replace
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import MOE_FP8_MMA, MOE_INT4_MMA
from hinfer.ops.triton.tiles.moe import fp8_experts_mma_tile
from hinfer.ops.triton.tiles.tuned import TUNED
r = pathlib.Path(sys.argv[1])
for name, (n, k) in (("35b", (2048, 512)), ("122b", (2048, 3072))):
    table.write(r / f"tuned_{name}_cap96.json",
                [table.entry(MOE_INT4_MMA, n, k, 32, replace(TUNED[(MOE_INT4_MMA, n, k, 32)], max_regs=96))])
table.write(r / "tuned_122b_fp8_cap96.json",
            [table.entry(MOE_FP8_MMA, 2048, 3072, m, replace(fp8_experts_mma_tile(t * 9, 2048, 3072, t * 9), max_regs=96))
             for t, m in ((1, 16), (2, 32))])
PY
arm() {  # arm NAME TILES MODEL QUANT LANES
  HINFER_TILES=$2 BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$3" --quant "$4" --concurrency "$5" --depths 1K --prefill ""
}
for round in a b; do
  for m in 35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b; do
    name=${m%%:*} model=${m#*:}
    left "${BUDGET:-200}" && arm "${name}_packaged_$round" "" "$model" int4 2,3
    left "$((${BUDGET:-200} + 30))" && arm "${name}_cap96_$round" "$R/tuned_${name}_cap96.json" "$model" int4 2,3
  done
done
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "${mem:-0}" -gt 100000 ] || { echo "the 122B-A10B at fp8 needs an H200"; exit 0; }
for round in a b; do
  left 420 && arm "122b_fp8_packaged_$round" "" qwen3.5-122b-a10b fp8 1,2
  left 450 && arm "122b_fp8_cap96_$round" "$R/tuned_122b_fp8_cap96.json" qwen3.5-122b-a10b fp8 1,2
done
