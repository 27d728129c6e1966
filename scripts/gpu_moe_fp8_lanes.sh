#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): the fp8 experts' new one- to four-token tiles in the decode
# graph. The four-token sweep (its down was cut at 16:42 on 2026-12-06), then the 35B-A3B at fp8 on the packaged
# tiles (the one-token ones staged, the gate_up routing its token) against the candidates, alternated: the
# three-token tiles (gate_up 28.19 -> 22.65 us, down 15.04 -> 13.40 alone: two and three lanes) and the four-token
# ones (four lanes, a one-lane MTP round at K = 3), from bench/results/tiles/moe-fp8/ and the sweep. Lands in
# $OUT/gpu_moe_fp8_lanes.tgz. SKIP_SWEEP=1: the three-token tiles and the lanes' arms alone (about four minutes).
set -uo pipefail
PACK=gpu_moe_fp8_lanes; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
[ -n "${SKIP_SWEEP:-}" ] || timeout 100 python bench/experts_mma_tiles.py --fmt fp8 --model 35b --t 4 --splits 1 --max-regs 0,128 \
  --json "$R/sweep_t4.json" --tuned-out "$R/tuned_t4.json" > "$R/sweep_t4.txt" 2>&1
echo "== sweep t4 rc=$? $((SECONDS - START)) s"; grep -E "default" "$R/sweep_t4.txt"
python - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1]); d = pathlib.Path("bench/results/tiles/moe-fp8")
rows = json.loads((d / "20261206-35b-t3.json").read_text())
if (r / "tuned_t4.json").exists():
    rows += json.loads((r / "tuned_t4.json").read_text())
(r / "tuned.json").write_text(json.dumps(rows, indent=1))
print("candidates:", [(e["n"], e["k"], e["m"]) for e in rows])
PY
pack
for round in a b; do
  for arm in packaged tuned; do
    if [ $arm = tuned ]; then export HINFER_TILES="$R/tuned.json"
    else unset HINFER_TILES; fi
    left 290 && BENCH_TIMEOUT=70 bench_as "lanes_${arm}_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 \
      --concurrency 1,2,3,4 --depths 1K --prefill ""
    [ -z "${SKIP_SWEEP:-}" ] && left 330 && BENCH_TIMEOUT=50 bench_as "mtp_${arm}_$round" "$PWD" qwen3.6-35b-a3b --quant fp8 \
      --spec mtp --spec-k 3 --concurrency 1 --depths 1K --prefill "" --steps 64
  done
done
