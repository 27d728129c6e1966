#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the MoE decode issue's lines not yet measured. The MoE
# kernel table (routed experts and router at T = 1 / 8 / 32 tokens: us per layer, share of the selected experts'
# byte floor, the kernels of one layer with their times, i.e. launches per layer); the 35B-A3B at fp8 and bf16 beside
# its int4 (ratio to floor, no line); its MTP rounds at K = 3 (round cost, tok/s projected at 3.2 tokens a round;
# the line 1,200 at one lane); the 122B-A10B at eight lanes x 64K (plan, then decode at that depth). Lands in
# $OUT/gpu_moe_lines.tgz.
set -uo pipefail
PACK=gpu_moe_lines; source "$(dirname "$0")/device_common.sh"
timeout 150 python bench/moe_kernels.py --model 35b 122b --t 1 8 32 --fmt int4 --profile > "$R/moe_table.txt" 2>&1
echo "== moe table rc=$? $((SECONDS - START)) s"; tail -20 "$R/moe_table.txt"; pack
line() {  # line NAME SECONDS MODEL ARGS...
  local name=$1 seconds=$2; shift 2
  left $((590 - seconds)) || return 1
  BENCH_TIMEOUT=$seconds bench_as "$name" "$PWD" "$@"
}
line fp8_35b 80 qwen3.6-35b-a3b --quant fp8 --concurrency 1,8 --depths 1K --prefill ""
line bf16_35b 80 qwen3.6-35b-a3b --quant bf16 --concurrency 1,8 --depths 1K --prefill ""
line mtp_35b 110 qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K --prefill ""
python -m hinfer plan qwen3.5-122b-a10b --weights int4 --max-context 65536 --max-concurrency 8 \
  > "$R/plan_122b_64k.txt" 2>&1; tail -3 "$R/plan_122b_64k.txt"; pack
line deep_122b 140 qwen3.5-122b-a10b --quant int4 --concurrency 8 --depths 64K --prefill ""
