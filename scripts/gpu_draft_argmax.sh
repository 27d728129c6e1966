#!/usr/bin/env bash
# One device call: greedy draft steps with the drafter's head and argmax captured in the MTP step's graph (one
# replay a draft step, where the head launched eagerly left the GPU waiting on the host each step). The GPU test
# of greedy identity through the graphs, then the 27B int4 MTP rounds (K = 3, one and eight lanes) of this tree
# against the tree before it (AB_OLD: a copy of its hinfer package, carried under .kcache), alternated twice, and
# with int4_a8 entries at 2 / 4 rows with x ahead (bench/tile_variants.py --a8-rows 2,4 --a8-ahead); the one-lane
# round's profile last (python -P: the package from PYTHONPATH, not the working directory).
# Lands in $OUT/gpu_draft_argmax.tgz.
set -uo pipefail
PACK=gpu_draft_argmax; source "$(dirname "$0")/device_common.sh"
AB_OLD=${AB_OLD:-.kcache/ab}
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_engine_gpu.py \
  -k spec_graphs_greedy_equal_plain_decode > "$R/tests.txt" 2>&1
echo "== GPU test rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
pack
python bench/tile_variants.py --config qwen3.6-27b --a8-rows 2,4 --a8-ahead --out-dir "$R" > /dev/null
AHEAD="$R/qwen3.6-27b-int4_a8-rows2-4-ahead.json"
SPEC=(qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K --prefill "" --steps 64)
for i in 1 2; do
  left 400 && bench_as "before_$i" "$AB_OLD:$PWD" "${SPEC[@]}"
  left 430 && bench_as "argmax_graph_$i" "$PWD" "${SPEC[@]}"
done
left 460 && HINFER_TILES="$AHEAD" bench_as argmax_graph_a8_ahead "$PWD" "${SPEC[@]}"
if left 500; then
  timeout 80 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 --trace "$R/spec_c1_trace.json.gz" \
    > "$R/profile_spec_c1.txt" 2>&1
  echo "== spec round profile rc=$?"; grep -E "^round|GPU busy|GPU idle" "$R/profile_spec_c1.txt"
  python bench/trace_gaps.py "$R/spec_c1_trace.json.gz" --units 5 --list 12 > "$R/trace_gaps_c1.txt" 2>&1
  head -14 "$R/trace_gaps_c1.txt" | cut -c1-200
  rm -f "$R/spec_c1_trace.json.gz"
  pack
fi
