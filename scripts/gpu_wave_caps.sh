#!/usr/bin/env bash
# One device call on an H200 (about four minutes, carry .kcache; the 122B-A10B at fp8 needs its memory): the
# 122B-A10B's fp8 experts gate_up at one and two tokens, 576 programs of 4 warps at 98-112 registers, 4 an SM (528
# at once: one wave past a whole one, `python bench/waves.py --experts 122b --fmt fp8`), held to 96 registers (660,
# 8-16 bytes of stack), as the int4 experts' one- and two-token launches were (bench/RESULTS.md, 2026-12-07).
# Decode at one to three lanes (three tokens share the 32 bucket with two: a cap that costs them goes to a finer
# bucket, forms.FINER), the packaged tile against the entries capped (HINFER_TILES), alternated. Lands in
# $OUT/gpu_wave_caps.tgz.
set -uo pipefail
PACK=gpu_wave_caps; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ "${mem:-0}" -gt 100000 ] || { echo "the 122B-A10B at fp8 needs an H200"; exit 0; }
python - "$R" <<'PY'
import pathlib, sys
from dataclasses import replace
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import MOE_FP8_MMA
from hinfer.ops.triton.tiles.moe import fp8_experts_mma_tile
table.write(pathlib.Path(sys.argv[1]) / "tuned_122b_fp8_cap96.json",
            [table.entry(MOE_FP8_MMA, 2048, 3072, m, replace(fp8_experts_mma_tile(t * 9, 2048, 3072, t * 9), max_regs=96))
             for t, m in ((1, 16), (2, 32))])
PY
arm() {  # arm NAME TILES MODEL QUANT LANES
  HINFER_TILES=$2 BENCH_TIMEOUT=100 bench_as "$1" "$PWD" "$3" --quant "$4" --concurrency "$5" --depths 1K --prefill ""
}
for round in a b; do
  left 360 && arm "122b_fp8_packaged_$round" "" qwen3.5-122b-a10b fp8 1,2,3
  left 420 && arm "122b_fp8_cap96_$round" "$R/tuned_122b_fp8_cap96.json" qwen3.5-122b-a10b fp8 1,2,3
done
