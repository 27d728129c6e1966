#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache and .whl): what the CPU built since the last calls. Two launch
# fusions at 2-32 rows, both off until measured: the MoE route and alignment in one launch (`route_align`) and the
# int4 kernel's bf16 tail rows (the GDN in_proj's b / a) for a block of rows at once (`tail` beyond one row): their
# GPU tests, then 35B-A3B and 122B-A10B decode at eight lanes with each and both, against neither; the vision tower
# again now that its attention takes SDPA's fused kernels (it ran on the math kernel); the structured-output bench
# (its window now counts each lane's tokens); then Nsight Compute on the 32-row int4 warpgroup-MMA kernel (27B
# gate_up: 9.3 ms of an eight-lane MTP round is this kernel). Lands in $OUT/gpu_route_align.tgz.
set -uo pipefail
PACK=gpu_route_align; source "$(dirname "$0")/device_common.sh"
server_wheels
timeout 120 python -m pytest -q tests/gpu/test_moe_kernels.py tests/gpu/test_int4_mma.py -m gpu \
  -k "route_and_align or tail_rows" -p no:cacheprovider > "$R/test_fusions.txt" 2>&1
rc=$?; echo "== fusion GPU tests rc=$rc $((SECONDS - START)) s"; tail -2 "$R/test_fusions.txt"; pack
c8() { HINFER_FUSE_LAUNCHES="$3" bench_as "$1" "$PWD" "$2" --quant int4 --concurrency 8 --depths 1K --prefill ""; }
if [ $rc -eq 0 ]; then
  for run in 35b:base 35b:route_align 35b:tail 35b:route_align,tail 122b:base 122b:route_align,tail 35b:base; do
    left 250 || break
    m=qwen3.6-35b-a3b; [ "${run%%:*}" = 122b ] && m=qwen3.5-122b-a10b
    extra=${run#*:}; lists=gate,norm_linear; [ "$extra" = base ] || lists="$lists,$extra"
    c8 "${run/:/_}" $m "$lists"
  done
fi
left 320 && { timeout 90 python -m hinfer bench qwen3.6-27b --vision --quant bf16 --out "$R" > "$R/vision_bf16.txt" 2>&1
  echo "== vision rc=$? $((SECONDS - START)) s"; grep -E "^\| [0-9]|image costs|checks" "$R/vision_bf16.txt"; pack; }
left 410 && { timeout 120 python -m hinfer bench qwen3.6-27b --structured --out "$R" > "$R/structured.txt" 2>&1
  echo "== structured rc=$? $((SECONDS - START)) s"; grep -vE "DEBUG|INFO" "$R/structured.txt" | tail -12; pack; }
left 480 && ncu_run ncu_wgmma_27b_gate_up_m32 int4_wgmma_kernel 45 bench/int4_mma_ncu.py --shape gate_up --m 32 --wgmma
