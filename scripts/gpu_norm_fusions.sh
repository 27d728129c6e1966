#!/usr/bin/env bash
# One device call: `norm_linear`, a MoE layer's router in its residual-add + RMSNorm launch. Its GPU tests at the
# real shapes, then int4 35B-A3B and 122B-A10B at one lane, twice each way: the default (the router in the norm's
# launch) against the comma list of the other fusions a lane takes by default (slot_sum, tail, gate), which
# leaves the router as its own launch. Everything lands in $OUT/gpu_norm_fusions.tgz.
set -uo pipefail
PACK=gpu_norm_fusions; source "$(dirname "$0")/device_common.sh"
UNFUSED=slot_sum,tail,gate
timeout 150 python -m pytest -q -s -m gpu --tb=short -p no:cacheprovider tests/gpu/test_moe_kernels.py \
  tests/gpu/test_engine_gpu.py -k "router_in_the_norm_launch" > "$R/tests.txt" 2>&1
echo "== GPU tests rc=$? $(tail -1 "$R/tests.txt")"; grep -E "norm_linear|norm's launch|^(FAILED|E )" "$R/tests.txt" | head -12
pack
run() {  # run NAME MODEL [ARGS...] FUSE
  local name=$1 model=$2 fuse=${@: -1}
  set -- "${@:3:$(($# - 3))}"
  HINFER_FUSE_LAUNCHES=$fuse timeout 80 python -m hinfer bench "$model" --concurrency 1 --depths 1K --prefill "" \
    --out "$R" "$@" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $(grep -E 'decode C=' "$R/$name.txt")"
}
# one pair per model first, then a second round while the call lasts
for i in 1 2; do
  for c in "35b qwen3.6-35b-a3b --quant int4" "122b qwen3.5-122b-a10b --quant int4"; do
    set -- $c; name=$1; shift
    left 440 && run "${name}_default_$i" "$@" 1
    left 460 && run "${name}_unfused_$i" "$@" "$UNFUSED"
  done
  pack
done
