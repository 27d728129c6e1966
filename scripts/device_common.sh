# Sourced by the one-call device scripts (PACK names their archive): logs go to $R (under $OUT) and `pack` puts
# them in $OUT/$PACK.tgz, since the device returns a handful of files per call; `left S` is true while fewer
# than S seconds have passed (each step guards itself so the call ends under its limit); the GPU's name and
# clocks go to env.txt. Compiled kernels travel between calls (scripts/kcache.sh: carry `.kcache`).
OUT="${OUT:-/tmp/hinfer-out}"; R="$OUT/r"; mkdir -p "$R"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
START=$SECONDS
left() { [ $((SECONDS - START)) -lt "${1:-520}" ]; }
source "$(dirname "${BASH_SOURCE[0]}")/kcache.sh"
pack() { tar czf "$OUT/$PACK.tgz" -C "$R" .; kcache_pack "$OUT" > /dev/null; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$R/env.txt" 2>&1
# `gpu_tests NAME SECONDS PYTEST_ARGS...`: GPU tests (-m gpu) logged to $R/NAME.txt, their last lines echoed, packed;
# returns pytest's status (a script stops on it: `gpu_tests ... || exit 0`)
gpu_tests() {
  local name=$1 seconds=$2; shift 2
  timeout "$seconds" python -m pytest -q -m gpu -p no:cacheprovider "$@" > "$R/$name.txt" 2>&1
  local rc=$?; echo "== $name rc=$rc $((SECONDS - START)) s"; tail -3 "$R/$name.txt"; pack; return $rc
}
# `decode_bench NAME MODEL [ARGS...]`: int4 decode at 1 and 8 lanes, depth 1K (env set before the call applies),
# logged to $R/NAME.txt, its tok/s lines echoed, packed
decode_bench() {
  local name=$1 model=$2; shift 2
  timeout 80 python -m hinfer bench "$model" --quant int4 --concurrency 1,8 --depths 1K --prefill "" --out "$R" "$@" \
    > "$R/$name.txt" 2>&1
  echo "== $name rc=$?"; grep -E "decode C=" "$R/$name.txt"
  pack
}
# `bench_as NAME PYPATH [ARGS...]`: `hinfer bench ARGS` importing hinfer from PYPATH (python -P: the working
# directory does not come first), so one call can A/B an older tree's package (`git archive REV hinfer | tar -x -C
# .kcache/ab`, PYPATH=.kcache/ab:$PWD) against this one ($PWD); logged to $R/NAME.txt, its decode and
# speculative-round lines echoed, packed. BENCH_TIMEOUT (default 100 s) bounds it.
bench_as() {
  local name=$1 path=$2; shift 2
  env PYTHONPATH="$path" timeout "${BENCH_TIMEOUT:-100}" python -P -m hinfer bench "$@" --out "$R" > "$R/$name.txt" 2>&1
  echo "== $name rc=$? $((SECONDS - START)) s"
  grep -E "decode C=|spec K=" "$R/$name.txt" | sed -E 's/^.*INFO hinfer.bench: //'
  pack
}
# `server_wheels`: the server's packages (fastapi, uvicorn, pydantic, ...: the image lacks them), carried as wheels in
# .whl (scripts/gpu_check.sh's header), installed into /tmp/site and put on PYTHONPATH
server_wheels() {
  [ -d .whl ] || return 0
  python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
}
# `ncu_run NAME KERNEL SECONDS ARGS...`: Nsight Compute on one launch of KERNEL in `python ARGS` (the sections of
# NCU_SECTIONS: the third launch, speed of light, scheduler and warp-state statistics, occupancy, memory, the stall
# reasons per issued instruction), the report in $R/NAME.txt, its headline figures and top stalls echoed, packed
NCU_SECTIONS="${NCU_SECTIONS:---launch-skip 2 --launch-count 1 --section SpeedOfLight --section SchedulerStats \
  --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio}"
ncu_run() {
  local name=$1 kernel=$2 seconds=$3; shift 3
  if ! command -v ncu > /dev/null; then echo "no ncu on this machine"; return 1; fi
  timeout "$seconds" ncu --kernel-name "$kernel" $NCU_SECTIONS python "$@" > "$R/$name.txt" 2>&1
  echo "== ncu $name rc=$? $((SECONDS - START)) s"
  grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit Reg" \
    "$R/$name.txt" | head -10
  grep -E "issue_stalled" "$R/$name.txt" | sort -k3 -n -r | head -6
  pack
}
# `tuned_ab SUFFIX NAME:MODEL...`: two alternated rounds of the caller's `arm NAME TILES MODEL` for each model whose
# sweep wrote $R/tuned_NAME_SUFFIX.json: its packaged tiles, then the sweep's (each while time is left)
tuned_ab() {
  local suffix=$1 round m name model; shift
  for round in a b; do
    for m in "$@"; do
      name=${m%%:*} model=${m#*:}
      [ -f "$R/tuned_${name}_${suffix}.json" ] || continue
      left 480 && arm "${name}_packaged_$round" "" "$model"
      left 510 && arm "${name}_${suffix}_$round" "$R/tuned_${name}_${suffix}.json" "$model"
    done
  done
}
