#!/usr/bin/env bash
# One device call: the int4 warpgroup-MMA tiles at the 35B-A3B and 122B-A10B dense shapes (their wins merged into
# one HINFER_TILES file), those models' int4 decode with them (35B-A3B with MTP rounds too), the 27B MTP rounds
# at a forced acceptance of 0.85 (about 3.2 tokens a round at K = 3), then the experts' tiles at 8 tokens with K
# splits and the prefix cache's turn-2 profile, as time allows. Everything lands in $OUT/gpu_wgmma_moe_spec.tgz.
set -uo pipefail
PACK=gpu_wgmma_moe_spec; source "$(dirname "$0")/device_common.sh"
for m in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  timeout 150 python bench/int4_wgmma.py --config $m --ms 4,8,16,32 --json "$R/int4_wgmma_$m.json" \
    --tiles "$R/wgmma_tiles_$m.json" > "$R/int4_wgmma_$m.txt" 2>&1
  echo "== wgmma vs mma.sync, $m rc=$?"; grep -E "^[a-z_0-9]+ +M=|^    \(" "$R/int4_wgmma_$m.txt"
  pack
done
python - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
entries = [e for f in sorted(r.glob("wgmma_tiles_*.json")) for e in json.loads(f.read_text())]
(r / "wgmma_tiles.json").write_text(json.dumps(entries, indent=1))
print(f"{len(entries)} wgmma entries")
PY
export HINFER_TILES="$R/wgmma_tiles.json"
if left 330; then
  timeout 110 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
    --depths 1K --prefill "" --steps 64 --out "$R" > "$R/bench_35b.txt" 2>&1
  echo "== 35B-A3B int4 + MTP rc=$?"; grep -E "decode C=|spec K=" "$R/bench_35b.txt"
  pack
fi
if left 400; then
  timeout 90 python -m hinfer bench qwen3.5-122b-a10b --quant int4 --concurrency 1,8 --depths 1K --prefill "" \
    --out "$R" > "$R/bench_122b.txt" 2>&1
  echo "== 122B-A10B int4 rc=$?"; grep -E "decode C=" "$R/bench_122b.txt"
  pack
fi
unset HINFER_TILES
if left 420; then
  timeout 140 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 --forced-acceptance 0.85 --out "$R" > "$R/bench_27b_forced.txt" 2>&1
  echo "== 27B int4 MTP forced acceptance 0.85 rc=$?"; grep -E "decode C=|spec K=|forced|accept" "$R/bench_27b_forced.txt" | tail -12
  pack
fi
if left 470; then
  timeout 90 python bench/profile_ttft.py --config qwen3.6-27b --history 32768 --new 200 > "$R/profile_ttft.txt" 2>&1
  echo "== turn-2 TTFT profile rc=$?"; head -30 "$R/profile_ttft.txt"
  pack
fi
