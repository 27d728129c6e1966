#!/usr/bin/env bash
# One device call (under nine minutes): scripts/gpu_wgmma_deep.sh (the int4 warpgroup-MMA kernel three groups
# deep: tests, sweep at 32 rows, an eight-lane MTP round A/B), then scripts/gpu_moe_xa.sh cut to its eight-token
# sweep and one decode A/B (the experts' x ahead). Lands in $OUT/gpu_wgmma_deep.tgz and $OUT/gpu_moe_xa.tgz.
set -uo pipefail
d="$(dirname "$0")"
SPEC_UNTIL=250 bash "$d/gpu_wgmma_deep.sh"
XA_SWEEP_S=130 DECODE_UNTIL=170 T1=0 bash "$d/gpu_moe_xa.sh"
