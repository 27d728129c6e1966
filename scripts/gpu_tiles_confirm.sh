#!/usr/bin/env bash
# One device call (about six minutes): the int4 experts' tiles at 8 and 32 tokens re-swept in the current form
# (the down reads silu(gate) * up as written) and 35B-A3B / 122B-A10B decode at 1 and 8 lanes with the winners
# (HINFER_TILES) against the packaged tiles (tile sweeps alone do not rank tiles as the decode graph does); the
# GDN decode tiles swept (BV = V included). Lands in $OUT/gpu_tiles_confirm.tgz.
set -uo pipefail
PACK=gpu_tiles_confirm; source "$(dirname "$0")/device_common.sh"
timeout 200 python bench/experts_mma_tiles.py --model 35b 122b --t 8 32 --splits 1,2 \
  --tuned-out "$R/tuned_experts.json" > "$R/experts_sweep.txt" 2>&1
echo "== experts sweep rc=$?"; grep -E "us|TUNED|MOE_INT4" "$R/experts_sweep.txt" | tail -16; pack
for m in "35b qwen3.6-35b-a3b" "122b qwen3.5-122b-a10b"; do
  set -- $m
  left 330 && decode_bench "$1_packaged" "$2"
  [ -s "$R/tuned_experts.json" ] && left 350 && HINFER_TILES="$R/tuned_experts.json" decode_bench "$1_swept" "$2"
done
left 420 && timeout 130 python bench/gdn_kernels.py --sweep-decode > "$R/gdn_sweep.txt" 2>&1
echo "== gdn sweep rc=$?"; grep -E "BV=" "$R/gdn_sweep.txt"; pack
