#!/usr/bin/env bash
# One device call (about nine minutes, carry .kcache): each program's groups of x read once into shared memory after
# the PDL wait (the tile's x_staged) instead of a round trip to L2 per group after the previous group's MMA. The
# timeline probes (2026-12-06, H100) put that x at 1.8 us of the 35B-A3B gate_up's 7.4 us k loop and 2.4 us of
# the dense one-row projections' 8.9 (loading it with the weights, x ahead, won the k loop back but its registers
# cost the gate_up a second wave). The GPU tests (the same bits, dense and experts, look-ahead and ring), the probe
# chains with an `x staged` arm, then one- and eight-lane decode with HINFER_X_STAGED off / one (where a program
# reads one row) / all (wherever it fits), alternated: 35B-A3B, then 122B-A10B off / one and 27B off / all (its one-row
# projections take the int8 kernel, linear_int4_a8, which this leaves alone). Lands in
# $OUT/gpu_x_staged.tgz.
set -uo pipefail
PACK=gpu_x_staged; source "$(dirname "$0")/device_common.sh"
gpu_tests test_staged 170 tests/gpu/test_int4_mma.py tests/gpu/test_moe_kernels.py -k "x_staged" || exit 0
for model in 35b 122b; do
  left 260 || break
  timeout 70 python bench/moe_chain_probe.py --model $model --json "$R/probe_$model.json" > "$R/probe_$model.txt" 2>&1
  echo "== probe $model rc=$? $((SECONDS - START)) s"; grep -E "programs," "$R/probe_$model.txt"; pack
done
arm() { HINFER_X_STAGED="$3" BENCH_TIMEOUT=60 bench_as "$1" "$PWD" "$2" --quant int4 --concurrency "${4:-1,8}" \
  --depths 1K --prefill ""; }
for round in a b; do
  for mode in off one all; do left 470 && arm "35b_${mode}_$round" qwen3.6-35b-a3b $mode; done
done
for mode in off one; do left 520 && arm "122b_${mode}" qwen3.5-122b-a10b $mode 1; done
for mode in off all; do left 545 && arm "27b_${mode}" qwen3.6-27b $mode; done
