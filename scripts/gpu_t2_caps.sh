#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): the three-token experts bucket (18-27 pairs: two and three
# lanes) in fewer waves. At two tokens (direct blocks, a pair each) the 35B-A3B's down and the 122B-A10B's gate_up
# are 1,152 programs of 2 warps at 120-125 registers: 8 an SM, 1,056 at once, so 96 run as a second wave
# (bench/waves.py's arithmetic on their sm_90 builds). Under 96 registers 10 fit (1,320; 0-8 bytes of stack); at
# three tokens both stay two waves. Decode at two and three lanes, the packaged tiles against the two entries
# capped (HINFER_TILES), alternated. Lands in $OUT/gpu_t2_caps.tgz.
set -uo pipefail
PACK=gpu_t2_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
python - "$R" <<'PY'
import pathlib, sys
from dataclasses import replace
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import MOE_INT4_MMA
from hinfer.ops.triton.tiles.tuned import TUNED
r = pathlib.Path(sys.argv[1])
for name, (n, k) in (("35b", (2048, 512)), ("122b", (2048, 3072))):
    table.write(r / f"tuned_{name}_cap96.json",
                [table.entry(MOE_INT4_MMA, n, k, 32, replace(TUNED[(MOE_INT4_MMA, n, k, 32)], max_regs=96))])
PY
arm() {  # arm NAME TILES MODEL
  HINFER_TILES=$2 BENCH_TIMEOUT=50 bench_as "$1" "$PWD" "$3" --quant int4 --concurrency 2,3 --depths 1K --prefill ""
}
for round in a b; do
  for m in 35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b; do
    name=${m%%:*} model=${m#*:}
    left "${BUDGET:-200}" && arm "${name}_packaged_$round" "" "$model"
    left "$((${BUDGET:-200} + 30))" && arm "${name}_cap96_$round" "$R/tuned_${name}_cap96.json" "$model"
  done
done
