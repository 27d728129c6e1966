#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache and .whl): what the CPU built since the last calls. The MoE
# route and alignment in one launch at 2-32 tokens (`route_align`, off until measured): its GPU test, then 35B-A3B
# and 122B-A10B decode at eight lanes with it and without, alternated; the vision tower again now that its
# attention takes SDPA's fused kernels (it ran on the math kernel); the structured-output bench (its window now
# lets a step that only queues the next one pass); then Nsight Compute on the 32-row int4 warpgroup-MMA kernel (27B
# gate_up: 9.3 ms of an eight-lane MTP round is this kernel). Lands in $OUT/gpu_route_align.tgz.
set -uo pipefail
PACK=gpu_route_align; source "$(dirname "$0")/device_common.sh"
server_wheels
timeout 90 python -m pytest -q tests/gpu/test_moe_kernels.py -m gpu -k "route_and_align" -p no:cacheprovider \
  > "$R/test_route_align.txt" 2>&1
rc=$?; echo "== route_align GPU tests rc=$rc $((SECONDS - START)) s"; tail -2 "$R/test_route_align.txt"; pack
c8() { HINFER_FUSE_LAUNCHES="$3" bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 8 --depths 1K --prefill ""; }
if [ $rc -eq 0 ]; then
  for m in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
    for arm in off on off on; do
      left 260 || break
      if [ $arm = on ]; then c8 "${m}_route_align_$arm" $m gate,norm_linear,route_align
      else c8 "${m}_route_align_$arm" $m gate,norm_linear; fi
    done
  done
fi
left 330 && { timeout 90 python -m hinfer bench qwen3.6-27b --vision --quant bf16 --out "$R" > "$R/vision_bf16.txt" 2>&1
  echo "== vision rc=$? $((SECONDS - START)) s"; grep -E "^\| [0-9]|image costs|checks" "$R/vision_bf16.txt"; pack; }
left 420 && { timeout 130 python -m hinfer bench qwen3.6-27b --structured --out "$R" > "$R/structured.txt" 2>&1
  echo "== structured rc=$? $((SECONDS - START)) s"; grep -vE "DEBUG|INFO" "$R/structured.txt" | tail -12; pack; }
left 470 && ncu_run ncu_wgmma_27b_gate_up_m32 int4_wgmma_kernel 45 bench/int4_mma_ncu.py --shape gate_up --m 32 --wgmma
