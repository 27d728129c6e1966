#!/usr/bin/env bash
# One device call (about seven minutes, carry .kcache with the tree before under .kcache/ab): the next round's drafts
# queued before the host reads a round's acceptance (MTPDrafter._chain: the pass over the verified positions, then
# K - 1 single-token steps whose rows the device moves to each lane's accepted position), and every draft step's
# tokens copied out of its graph's output at once (the third draft once overwrote the second). The 35B-A3B's
# greedy round sat 0.74 ms idle (2026-12-05 11:55 profile: the host staging the draft steps after the read). The
# GPU tests of speculation through the graphs, then MTP rounds (int4, K = 3, one and eight lanes, greedy and the
# Qwen defaults) of this tree against the tree before it (AB_OLD), alternated; then the 35B-A3B's one-lane round
# profile. Lands in $OUT/gpu_spec_chain.tgz.
set -uo pipefail
PACK=gpu_spec_chain; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
[ -e "$AB_OLD/hinfer/assets" ] || ln -s "$PWD/hinfer/assets" "$AB_OLD/hinfer/assets"  # carried without its 10 MB
gpu_tests test_spec 150 tests/gpu/test_row_shift_gpu.py tests/gpu/test_engine_gpu.py -k "spec_graphs or shift_rows"
spec() { BENCH_TIMEOUT=80 bench_as "$1" "$2" "$3" --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
  --prefill "" --steps 64 --sampling greedy,qwen; }
left 200 && spec chain_35b "$PWD" qwen3.6-35b-a3b
left 280 && spec before_35b "$AB_OLD:$PWD" qwen3.6-35b-a3b
left 360 && spec chain_27b "$PWD" qwen3.6-27b
left 440 && spec before_27b "$AB_OLD:$PWD" qwen3.6-27b
if left 480; then  # the round's remaining GPU idle, each gap named by the Python frames the GPU waited for
  timeout 60 python bench/profile_decode.py --config qwen3.6-35b-a3b --quant int4 --spec-k 3 --lanes 1 \
    --trace "$R/spec_35b_c1_trace.json.gz" > "$R/profile_spec_35b_c1.txt" 2>&1
  echo "== spec round profile rc=$?"; grep -E "^round|GPU busy|GPU idle" "$R/profile_spec_35b_c1.txt"
  python bench/trace_gaps.py "$R/spec_35b_c1_trace.json.gz" --units 5 --list 12 > "$R/trace_gaps_35b_c1.txt" 2>&1
  head -14 "$R/trace_gaps_35b_c1.txt" | cut -c1-200
  rm -f "$R/spec_35b_c1_trace.json.gz"; pack
fi
