#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): the one-token experts gate_up in a single wave. Nsight Compute
# (2026-12-07, H100) showed the packaged one-token gate_up of both MoE models as 576 programs of 4 warps held to 128
# registers: 4 programs an SM, 528 at once, so 48 run as a second wave. Under 96 registers 5 fit (660 slots). One-lane
# decode, the packaged tiles against the same tiles capped at 96 (HINFER_TILES), two alternated rounds per model.
# Lands in $OUT/gpu_t1_caps.tgz.
set -uo pipefail
PACK=gpu_t1_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
python - "$R" <<'PY'
import json, pathlib, sys
from dataclasses import replace
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import MOE_INT4_MMA
from hinfer.ops.triton.tiles.tuned import TUNED
r = pathlib.Path(sys.argv[1])
for name, (n, k) in (("35b", (1024, 2048)), ("122b", (2048, 3072))):
    tile = TUNED[(MOE_INT4_MMA, n, k, 16)]
    capped = replace(tile, max_regs=96)
    print(name, tile, "->", capped)
    table.write(r / f"tuned_{name}_cap96.json", [table.entry(MOE_INT4_MMA, n, k, 16, capped)])
PY
arm() {  # arm NAME TILES MODEL
  HINFER_TILES=$2 BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$3" --quant int4 --concurrency 1 --depths 1K --prefill ""
}
tuned_ab cap96 35b:qwen3.6-35b-a3b 122b:qwen3.5-122b-a10b
