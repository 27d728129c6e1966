#!/usr/bin/env bash
# One device call (about four minutes): the int4 kernel's reads alone (bench/int4_read_ceiling.py: the packaged
# tile, a read probe walking the words as that tile does, a whole-tensor read) on the 27B's and the 35B-A3B's
# dense shapes, then 27B / 35B-A3B int4 decode with this tree's defaults and --lm-head int4.
# Lands in $OUT/gpu_read_ceiling.tgz.
set -uo pipefail
PACK=gpu_read_ceiling; source "$(dirname "$0")/device_common.sh"
timeout 150 python bench/int4_read_ceiling.py --json "$R/read_ceiling_27b.json" > "$R/read_ceiling_27b.txt" 2>&1
echo "== 27b rc=$?"; grep -E "kernel|copy" "$R/read_ceiling_27b.txt"; pack
left 200 && timeout 90 python bench/int4_read_ceiling.py --config qwen3.6-35b-a3b --json "$R/read_ceiling_35b.json" \
  > "$R/read_ceiling_35b.txt" 2>&1
echo "== 35b rc=$?"; grep -E "kernel" "$R/read_ceiling_35b.txt"; pack
left 280 && decode_bench 35b_defaults qwen3.6-35b-a3b
left 300 && decode_bench 35b_head_int4 qwen3.6-35b-a3b --lm-head int4
left 320 && decode_bench 27b_head_int4 qwen3.6-27b --lm-head int4
