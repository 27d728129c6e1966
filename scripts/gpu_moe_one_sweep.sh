#!/usr/bin/env bash
# One device call (about six minutes, carry .kcache): a token's routed int4 experts in one launch (one_launch):
# its GPU test (bit for bit the two launches on the same gate_up tile, PDL graph chains, many replays in a row),
# the 35B-A3B's one-lane decode and MTP rounds both ways, alternated, a layer's parts (bench/moe_one_launch.py: the
# gate_up launch routing the token and given its ids, the wait), then its tiles (--sweep: gate_up tile x down rows,
# us per layer against the two launches) last: an H100 call that swept them
# with a 64-row tile packaged stopped answering (2026-12-05, cause unknown). Both on the experts' words stripe by
# stripe, the default since 2026-12-07 (the one launch reads them as the two do). Lands in $OUT/gpu_moe_one_sweep.tgz.
set -uo pipefail
PACK=gpu_moe_one_sweep; source "$(dirname "$0")/device_common.sh"
gpu_tests test_one_launch 200 tests/gpu/test_moe_kernels.py -k "one_launch" || exit 0
arm() { HINFER_FUSION_ROWS="$2" BENCH_TIMEOUT=45 bench_as "$1" "$PWD" qwen3.6-35b-a3b --quant int4 \
  --concurrency 1 --depths 1K --prefill "" --steps 128 "${@:3}"; }
left 260 && arm two_a ""
left 300 && arm one_a "one_launch=1"
left 340 && arm two_b ""
left 380 && arm one_b "one_launch=1"
left 400 && arm spec_two "" --spec mtp --spec-k 3
left 430 && arm spec_one "one_launch=1" --spec mtp --spec-k 3
left 440 && timeout 60 python bench/moe_one_launch.py --rounds 2 > "$R/parts.txt" 2>&1; grep -E "^  " "$R/parts.txt"; pack
left 480 && timeout 100 python bench/moe_one_launch.py --sweep --rounds 2 --json "$R/sweep.json" > "$R/sweep.txt" 2>&1
grep -E "^  |^[a-z0-9]" "$R/sweep.txt" | grep -vE "^ *(#|%|tt\.|scf|ttg|arith|llvm|\}|\^)" | tail -16; pack
