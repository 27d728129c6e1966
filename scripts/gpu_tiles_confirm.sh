#!/usr/bin/env bash
# One device call (about five minutes): the int4 fp8-prefill GPU tests, then the int4 experts' tiles at 8 and 32
# tokens re-swept in the current form (the down reads silu(gate) * up as written) and 35B-A3B decode at 1 and 8
# lanes with the winners (HINFER_TILES) against the packaged tiles (tile sweeps alone do not rank tiles as the
# decode graph does); the 122B-A10B and the GDN decode tiles as time allows. Lands in $OUT/gpu_tiles_confirm.tgz.
set -uo pipefail
PACK=gpu_tiles_confirm; source "$(dirname "$0")/device_common.sh"
timeout 80 python -m pytest -q -rf --tb=short -p no:cacheprovider -m gpu tests/gpu/test_int4_mma.py \
  tests/gpu/test_linear_kernels.py -k "prefills_on_fp8 or (test_int4 and not mma and not wgmma)" > "$R/tests.txt" 2>&1
echo "== tests rc=$?"; grep -E "^(FAILED|E )|passed|failed" "$R/tests.txt" | head -8; pack
left 100 && timeout 150 python bench/experts_mma_tiles.py --model 35b --t 8 32 --splits 1,2 \
  --tuned-out "$R/tuned_experts.json" > "$R/experts_sweep.txt" 2>&1
echo "== experts sweep rc=$?"; grep -E "TUNED|MOE_INT4|default" "$R/experts_sweep.txt" | tail -12; pack
left 250 && decode_bench 35b_packaged qwen3.6-35b-a3b
[ -s "$R/tuned_experts.json" ] && left 280 && HINFER_TILES="$R/tuned_experts.json" decode_bench 35b_swept qwen3.6-35b-a3b
left 300 && timeout 100 python bench/gdn_kernels.py --sweep-decode > "$R/gdn_sweep.txt" 2>&1
echo "== gdn sweep rc=$?"; grep -E "BV=" "$R/gdn_sweep.txt"; pack
