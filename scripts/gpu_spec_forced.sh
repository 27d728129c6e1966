#!/usr/bin/env bash
# One device call (about five minutes, carry .kcache): end-to-end speculative decoding at a known acceptance (the
# forced-acceptance mode: the recorded greedy continuation proposed with probability p, the MTP head still run; its
# drafter now keeps the early pass and the next round's chain, as real rounds do). p = 0.85 is about 3.2 tokens a
# round at K = 3, the issue's line: 27B int4 >= 650 tok/s at one lane and 3,000 at eight (last measured 2026-12-02:
# 236 / 845 with plain steps at 125 / 790). Then the 35B-A3B at the same p. 256 tokens a lane, timed from the step
# in which the last lane got its first token (at 64 with the prefill in, the fixed costs were half an H100 run's
# time). Then the 35B-A3B with every round accounted before the next launch. Lands in $OUT/gpu_spec_forced.tgz.
set -uo pipefail
PACK=gpu_spec_forced; source "$(dirname "$0")/device_common.sh"
forced() { BENCH_TIMEOUT=140 bench_as "$1" "$PWD" "$2" --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 \
  --depths 1K --prefill "" --steps 256 --forced-acceptance 0.85 "${@:3}"; grep -E "^\| [0-9]" "$R/$1.txt" | head -8; }
forced forced_27b qwen3.6-27b
left 300 && forced forced_35b qwen3.6-35b-a3b
# each round accounted before the next is launched (no decode ahead: its spec tok/s against the line above, where
# rounds no lane can stop in go first; the plain column loses its run-ahead too)
left 380 && forced forced_35b_in_turn qwen3.6-35b-a3b --no-decode-ahead
