#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache with .kcache/tiles/): the staged sweep's one-token experts
# gate_up tiles in the decode graph (HINFER_TILES), with and without the 128-register cap the packaged one-token
# tiles carry (the cap won 4% in the decode on 2026-12-03 where the isolated sweep saw none), against the packaged
# tiles, alternated: the 35B-A3B at one and eight lanes (64 columns of 4 warps, split 4) twice; the 35B-A3B's
# dense one-row projections swept with x staged (GDN in and out: 60 of its 80 dense launches a step); the
# 122B-A10B at one lane (64 of 4, split 2). Lands in $OUT/gpu_staged_tiles_check.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_check; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
T=$PWD/.kcache/tiles
for round in a b; do
  tiles_arm "35b_packaged_$round" "" qwen3.6-35b-a3b --concurrency 1,8
  tiles_arm "35b_64_cap_$round" "$T/moe35_64_cap.json" qwen3.6-35b-a3b --concurrency 1,8
  tiles_arm "35b_64_$round" "$T/moe35_t1_staged.json" qwen3.6-35b-a3b --concurrency 1,8
done
timeout 200 python bench/int4_mma_tiles.py --config qwen3.6-35b-a3b --ms 1 --shapes gdn_in,gdn_out --splits 2,4,8 \
  --json "$R/dense_35b.json" --tuned-out "$R/dense_35b_tuned.json" > "$R/dense_35b.txt" 2>&1
echo "== dense sweep rc=$? $((SECONDS - START)) s"; grep -E "M=1 +default" "$R/dense_35b.txt"; pack
left 440 && tiles_arm 122b_packaged "" qwen3.5-122b-a10b --concurrency 1
left 480 && tiles_arm 122b_64_cap "$T/moe122_64_cap.json" qwen3.5-122b-a10b --concurrency 1
left 520 && tiles_arm 122b_64 "$T/moe122_t1_staged.json" qwen3.5-122b-a10b --concurrency 1
