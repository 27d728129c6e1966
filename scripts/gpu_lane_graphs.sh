#!/usr/bin/env bash
# One device call (about four minutes, carry .kcache): a CUDA graph for every lane count to eight (three, five, six
# and seven lanes ran as four or eight before) against the buckets before it (set in the process before the bench),
# the MoE models at three, five, six and seven lanes (and eight: graphs captured as a server of eight lanes does). Lands in $OUT/gpu_lane_graphs.tgz.
set -uo pipefail
PACK=gpu_lane_graphs; source "$(dirname "$0")/device_common.sh"
cat "$R/env.txt"
for m in qwen3.6-35b-a3b qwen3.5-122b-a10b; do
  left 300 && timeout 70 python -c "import sys, hinfer.engine.cuda_graphs as g; g.BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32,
48, 64); from hinfer.cli.main import main; sys.exit(main())" bench $m --quant int4 --concurrency 3,5,6,7,8 --depths 1K \
    --prefill "" --out "$R" > "$R/${m##*-}_before.txt" 2>&1
  echo "== ${m##*-}_before rc=$?"; grep -E "decode C=|captured" "$R/${m##*-}_before.txt" | sed -E 's/^.*INFO [a-z.]*: //'; pack
  left 330 && BENCH_TIMEOUT=70 bench_as "${m##*-}_every" "$PWD" $m --quant int4 \
    --concurrency 3,5,6,7,8 --depths 1K --prefill ""
done
