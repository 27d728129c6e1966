#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache with .kcache/tiles/): the staged sweep's one-token experts
# gate_up tiles in the PDL chain (bench/moe_chain_probe.py under HINFER_TILES: the launch period the decode sees,
# where the sweep timed each launch alone) for the 35B-A3B (64 columns of 4 warps, 32 of 2) and the 122B-A10B, then
# the 122B-A10B's one-lane decode on its tile against the packaged one, alternated twice. Lands in
# $OUT/gpu_staged_tiles_check.tgz.
set -uo pipefail
PACK=gpu_staged_tiles_check; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
T=$PWD/.kcache/tiles
probe() {  # probe NAME MODEL [TILES]
  HINFER_TILES=${3:-} timeout 100 python bench/moe_chain_probe.py --model "$2" --json "$R/probe_$1.json" \
    > "$R/probe_$1.txt" 2>&1
  echo "== probe $1 rc=$? $((SECONDS - START)) s"; grep -iE "period|per launch|arm|programs" "$R/probe_$1.txt" | head -12; pack
}
probe 35b_packaged 35b
probe 35b_64 35b "$T/moe35_t1_staged.json"
probe 35b_32 35b "$T/moe35_t1_staged_32.json"
probe 122b_packaged 122b
probe 122b_64 122b "$T/moe122_t1_staged.json"
for round in a b; do
  left 420 && BENCH_TIMEOUT=60 bench_as "122b_packaged_$round" "$PWD" qwen3.5-122b-a10b --quant int4 --concurrency 1 \
    --depths 1K --prefill ""
  left 450 && HINFER_TILES=$T/moe122_t1_staged.json BENCH_TIMEOUT=60 bench_as "122b_tuned_$round" "$PWD" \
    qwen3.5-122b-a10b --quant int4 --concurrency 1 --depths 1K --prefill ""
done
