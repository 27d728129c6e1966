#!/usr/bin/env bash
# One device call: MTP rounds with the drafts fed to the verify graph from the device (the host queues
# verification while the last draft step runs) and greedy drafts taken as the argmax: 27B int4 rounds at 1 and 8
# lanes, the GPU test of greedy identity through the graphs, the C = 1 round's profile with a trace (whose GPU
# gaps bench/trace_gaps.py charges to the host frames around them), and 35B-A3B int4 rounds (experts of a
# 32-token verification on the tensor-core kernel, now the default), then 27B with the MTP layer in int4.
# Everything lands in $OUT/gpu_spec_host.tgz.
set -uo pipefail
PACK=gpu_spec_host; source "$(dirname "$0")/device_common.sh"
timeout 100 python -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
  --prefill "" --steps 64 --out "$R" > "$R/bench_27b_spec.txt" 2>&1
echo "== 27B int4 MTP rounds rc=$?"; grep -E "spec K=|decode C=" "$R/bench_27b_spec.txt"; pack
if left 100; then
  timeout 200 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_engine_gpu.py \
    -k spec_graphs_greedy_equal_plain_decode > "$R/tests.txt" 2>&1
  echo "== GPU test: spec graphs greedy = plain rc=$? $(tail -1 "$R/tests.txt")"; grep -E "^(FAILED|E )" "$R/tests.txt" | head
  pack
fi
if left 330; then
  timeout 70 python bench/profile_decode.py --quant int4 --spec-k 3 --lanes 1 --trace "$R/spec_c1_trace.json.gz" \
    > "$R/profile_spec_c1.txt" 2>&1
  echo "== spec round profile rc=$?"; grep -E "^round|GPU busy" "$R/profile_spec_c1.txt"; grep -A8 "GPU idle" "$R/profile_spec_c1.txt"
  python bench/trace_gaps.py "$R/spec_c1_trace.json.gz" --units 5 --list 12 > "$R/trace_gaps_c1.txt" 2>&1
  echo "== where the round's GPU gaps come from (host frames)"; head -30 "$R/trace_gaps_c1.txt"
  pack
fi
if left 400; then
  timeout 80 python -m hinfer bench qwen3.6-35b-a3b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 --out "$R" > "$R/bench_35b_spec.txt" 2>&1
  echo "== 35B-A3B int4 MTP rounds rc=$?"; grep -E "spec K=|decode C=" "$R/bench_35b_spec.txt"; pack
fi
if left 460; then  # the MTP layer in int4 too: the draft steps' bf16 bytes are now a visible share of the round
  timeout 80 python -m hinfer bench qwen3.6-27b --quant int4-mtp --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 64 --out "$R" > "$R/bench_27b_int4_mtp.txt" 2>&1
  echo "== 27B int4-mtp MTP rounds rc=$?"; grep -E "spec K=|decode C=" "$R/bench_27b_int4_mtp.txt"; pack
fi
