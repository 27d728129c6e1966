#!/usr/bin/env bash
# One device call: int4 decode A/B in one process tree, this tree against an older copy of the package in
# ab_base/ (`git archive REV hinfer | tar x -C ab_base`, untracked), alternated to spread drift: MODELS (default
# the 27B and the 35B-A3B), then the read probe table. Lands in $OUT/gpu_ab.tgz.
set -uo pipefail
PACK=gpu_ab; source "$(dirname "$0")/device_common.sh"
base_bench() {  # NAME MODEL: decode_bench on ab_base's package
  local name=$1 model=$2; shift 2
  (cd ab_base && PYTHONPATH="$PWD" timeout 80 python -m hinfer bench "$model" --quant int4 --concurrency 1,8 \
    --depths 1K --prefill "" --out "$R" "$@" > "$R/$name.txt" 2>&1)
  echo "== $name rc=$?"; grep -E "decode C=" "$R/$name.txt"; pack
}
for model in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  for i in 1 2; do
    left 380 && decode_bench "${model}_new_$i" "$model"
    left 400 && base_bench "${model}_base_$i" "$model"
  done
done
left 430 && timeout 70 python bench/int4_read_ceiling.py --json "$R/read_ceiling_27b.json" > "$R/read_ceiling_27b.txt" 2>&1
echo "== read ceiling rc=$?"; grep -E "kernel" "$R/read_ceiling_27b.txt" | cut -c1-60; pack
