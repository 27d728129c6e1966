#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): more warps in flight on the 35B-A3B's latency-bound int4
# launches. Nsight Compute (2026-12-07, H100) put the one-row o_proj / GDN out_proj (2048 x 4096: 128 programs of 4
# warps, 4 groups each) at one warp a scheduler and 14% of DRAM, the GDN in_proj at 16% occupancy and 30%; the
# eight-token experts gate_up (104 registers) at 8 programs an SM (25%) and the down (182) at 4 (12.5%), 46-54%.
# 1. the dense one-row tiles with splits down to 2 groups (twice the programs; the sweep kept >= 4 until now);
# 2. the eight-token experts tiles on 2 warps under register caps of 64-96 (more programs an SM);
# 3. decode at one and eight lanes on both sweeps' winners (one tile file: the one-row entries change one lane, the
#    72-pair ones eight) against the packaged tiles, two alternated rounds. Lands in $OUT/gpu_programs.tgz.
set -uo pipefail
PACK=gpu_programs; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
timeout 170 python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --ms 1 --shapes qkv,gdn_in,o_proj --splits 4,8,16 \
  --min-groups 2 --rows 64,128 --warps 2,4,8 --json "$R/sweep_dense.json" --tuned-out "$R/tuned_dense.json" \
  > "$R/sweep_dense.txt" 2>&1
echo "== sweep dense one row rc=$? $((SECONDS - START)) s"; grep -E "M=1|^  " "$R/sweep_dense.txt" | head -16; pack
left 200 && timeout 140 python bench/experts_mma_tiles.py --model 35b --t 8 --splits 1 --rows 32,64,128 --warps 2 \
  --max-regs 0,64,80,96 --json "$R/sweep_caps.json" --tuned-out "$R/tuned_caps.json" > "$R/sweep_caps.txt" 2>&1
echo "== sweep experts t8 caps rc=$? $((SECONDS - START)) s"; grep -E "^35b |^  " "$R/sweep_caps.txt" | head -10; pack
python - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
entries = [e for f in ("tuned_dense.json", "tuned_caps.json") if (r / f).exists() for e in json.loads((r / f).read_text())]
if entries:
    (r / "tuned_35b_both.json").write_text(json.dumps(entries, indent=1))
print(f"{len(entries)} entries")
PY
arm() {  # arm NAME TILES MODEL
  HINFER_TILES=$2 BENCH_TIMEOUT=70 bench_as "$1" "$PWD" "$3" --quant int4 --concurrency 1,8 --depths 1K --prefill ""
}
tuned_ab both 35b:qwen3.6-35b-a3b
