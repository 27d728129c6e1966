#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): the routed int4 experts with the words through a cp.async
# ring (the tile's `ring`; the eight-token gate_up 255 -> 174 registers on 2 warps, 108 on 4) and every experts
# launch now loading its words 16 bytes a thread (was 8: a codegen change of the packaged path). Their GPU tests
# (the ring bit for bit against the register look-ahead; the packaged paths), 35B-A3B and 122B-A10B int4 decode at
# one and eight lanes on the packaged tiles (against 2026-12-04's 493.6-501.3 / 1,940.5-1,951.8 and 282.6 / 820.7
# tok/s), then the experts tile sweep at 8 and 32 tokens with rings 0 / 4 and decode with its winners.
# Lands in $OUT/gpu_experts_ring.tgz.
set -uo pipefail
PACK=gpu_experts_ring; source "$(dirname "$0")/device_common.sh"
gpu_tests test_experts 150 tests/gpu/test_moe_kernels.py -k "words_ring or int4_real_shapes or split_k" || exit 0
decode_bench decode_35b qwen3.6-35b-a3b
decode_bench decode_122b qwen3.5-122b-a10b
left 300 && { timeout 170 python bench/experts_mma_tiles.py --model 35b --t 8 32 --splits 1,2 --rings 0,4 \
  --json "$R/experts_ring_sweep.json" --tuned-out "$R/experts_ring_tiles.json" > "$R/experts_ring_sweep.txt" 2>&1
  echo "== experts sweep rc=$? $((SECONDS - START)) s"; grep -E "default .* best" "$R/experts_ring_sweep.txt"; pack; }
[ -s "$R/experts_ring_tiles.json" ] && left 490 && HINFER_TILES="$R/experts_ring_tiles.json" \
  decode_bench decode_35b_swept qwen3.6-35b-a3b
