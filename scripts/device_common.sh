# Sourced by the one-call device scripts (PACK names their archive): logs go to $R (under $OUT) and `pack` puts
# them in $OUT/$PACK.tgz, since the device returns a handful of files per call; `left S` is true while fewer
# than S seconds have passed (each step guards itself so the call ends under its limit); the GPU's name and
# clocks go to env.txt.
OUT="${OUT:-/tmp/hinfer-out}"; R="$OUT/r"; mkdir -p "$R"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
START=$SECONDS
left() { [ $((SECONDS - START)) -lt "${1:-520}" ]; }
pack() { tar czf "$OUT/$PACK.tgz" -C "$R" .; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/env.txt" 2>&1
