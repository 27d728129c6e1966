#!/usr/bin/env bash
# One device call: environment, GPU tests, kernel micro-benchmarks, and `hinfer bench`. Logs go to $OUT/r, packed.
# Usage: bash scripts/gpu_check.sh [quick|tests|bench|full|quant|spec|specserve|moe|profile|cache|agent|structured|vision]   (HINFER_COMMIT=<sha> names the commit)
#   quant: int4 + fp8 27B benches; spec: MTP rounds, int4 27B; moe: small bf16 GEMV tiles, then 35B-A3B / 122B int4;
#   specserve: a plain and a --spec mtp server on a random 16-layer 27B checkpoint, tok/s at 1 and 8 clients;
#   cache: prefix-cache TTFT and agent benches (27B); agent: the agent bench alone, with the whole call; structured: decode with a JSON schema vs without (27B, 8 lanes);
#   vision: encoder ms per image (512, 1024, 2048) and TTFT of one 1024x1024 image + 100 text tokens vs text only (27B bf16, int4); profile: where a decode step's time goes (kernel table) for the int4 27B, 35B-A3B and 122B-A10B at 1 and 8 lanes
# Packages the device image lacks travel as wheels in .whl (git-ignored; name it in the call's carry):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
#     -d .whl xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
#   and for `hinfer serve` (specserve, and any server run there): fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0
#   pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 annotated-doc==0.0.7
#   opentelemetry-api==1.45.2 typing_extensions==4.16.0 (add --platform manylinux_2_17_x86_64 for pydantic_core)
set -uo pipefail
MODE="${1:-full}"
# logs under $OUT/r, packed into $OUT/gpu_check-MODE.tgz at exit (the device returns a few files only)
TOP="${OUT:-/tmp/hinfer-out}"; OUT="$TOP/r"; mkdir -p "$OUT"
source "$(dirname "$0")/kcache.sh"  # compiled kernels carried between calls (carry `.kcache`)
trap 'tar czf "$TOP/gpu_check-$MODE.tgz" -C "$OUT" .; kcache_pack "$TOP"' EXIT
export PYTHONUNBUFFERED=1 HINFER_CACHE=/tmp/hinfer-cache
PY=python3
if [ -d .whl ]; then  # wheels carried for packages missing on the image
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv; $PY -c 'import torch,triton;print(torch.__version__, triton.__version__)'; } 2>&1 | tee "$OUT/env.log"

if [[ "$MODE" == quick || "$MODE" == tests || "$MODE" == full ]]; then
  for t in test_gdn_kernels test_norm_attention_kernels test_linear_kernels test_int4_mma test_pdl test_moe_kernels test_engine_gpu ${EXTRA_TESTS:-}; do
    timeout "${TEST_TIMEOUT:-150}" $PY -m pytest -q -s tests/gpu/$t.py -m gpu -p no:cacheprovider > "$OUT/$t.log" 2>&1
    echo "== $t: rc=$? $(grep -E '(passed|failed|error)' "$OUT/$t.log" | tail -1)"
  done
fi
if [[ "$MODE" == quick ]]; then
  timeout 200 $PY -m hinfer bench qwen3.6-27b --layers 8 --concurrency 1,8 --depths 1K,32K --prefill 8K --steps 16 \
    --out "$OUT" 2>&1 | tee "$OUT/bench_quick.log" | tail -15
fi
if [[ "$MODE" == bench || "$MODE" == full ]]; then
  for f in bench/gdn_kernels.py bench/attention_kernels.py bench/linear_kernels.py; do
    [ -f "$f" ] && timeout 120 $PY "$f" 2>&1 | tee "$OUT/$(basename "$f" .py).log" | tail -12
  done
  timeout 400 $PY -m hinfer bench qwen3.6-27b --vs-hf --out "$OUT" 2>&1 | tee "$OUT/bench_27b_bf16.log" | tail -25
fi
if [[ "$MODE" == quant ]]; then
  timeout 150 $PY bench/linear_kernels.py --formats bf16,int4,fp8,fp8-block --ms 1,8 2>&1 | tee "$OUT/linear.log" | tail -20
  for q in int4 fp8; do
    timeout 200 $PY -m hinfer bench qwen3.6-27b --quant $q --concurrency 1,8 --depths 1K --prefill 8K --out "$OUT" \
      2>&1 | tee "$OUT/bench_27b_$q.log" | tail -8
  done
fi
if [[ "$MODE" == spec ]]; then
  for lanes in 1 8; do  # where a round's time goes (GPU busy vs wall: the host's share)
    timeout 120 $PY bench/profile_decode.py --quant int4 --spec-k 3 --lanes $lanes 2>&1 \
      | tee "$OUT/profile_spec_27b_int4_k3_c$lanes.log" | grep -v Warn | head -16
  done
  timeout 500 $PY -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 1,2,3,4,5 --concurrency 1,2,4,8 \
    --depths 1K --prefill "" --out "$OUT" 2>&1 | tee "$OUT/bench_27b_int4_spec.log" | tail -30
  timeout 500 $PY -m hinfer bench qwen3.6-27b --quant int4 --spec mtp --spec-k 3 --concurrency 1,8 --depths 1K \
    --prefill "" --steps 128 --forced-acceptance 0,0.5,0.8 --out "$OUT" 2>&1 \
    | tee "$OUT/bench_27b_int4_spec_forced.log" | tail -12
fi
if [[ "$MODE" == specserve ]]; then  # serving: adaptive speculation must keep >= 0.95 of plain tok/s on random weights
  timeout 540 $PY -m hinfer bench qwen3.6-27b --spec-serving --layers 16 --concurrency 1,8 --out "$OUT" 2>&1 \
    | tee "$OUT/bench_27b_spec_serving.log" | tail -14
fi
if [[ "$MODE" == moe ]]; then
  # the small bf16 GEMVs of a MoE step (routers, GDN b / a rows) are latency-bound: sweep their tiles, use them
  timeout 120 $PY bench/linear_kernels.py --tune --formats bf16 --ms 1,8 \
    --shapes gdn_ab,gdn_ab_35b,router_35b,gdn_ab_122b,router_122b --tuned-out "$OUT/small_bf16_tuned.json" 2>&1 \
    | tee "$OUT/small_bf16_tune.log" | grep -E "best" | head -12
  [ -s "$OUT/small_bf16_tuned.json" ] && export HINFER_TILES="$OUT/small_bf16_tuned.json"
  timeout 120 $PY bench/moe_kernels.py --model 35b 2>&1 | tee "$OUT/moe_kernels.log" | tail -12
  timeout 250 $PY -m hinfer bench qwen3.6-35b-a3b --quant int4 --concurrency 1,8 --depths 1K --prefill 8K \
    --out "$OUT" 2>&1 | tee "$OUT/bench_35b_int4.log" | tail -8
  timeout 250 $PY -m hinfer bench qwen3.5-122b-a10b --quant int4 --concurrency 1,8 --depths 1K,64K --prefill "" \
    --out "$OUT" 2>&1 | tee "$OUT/bench_122b_int4.log" | tail -8
fi
if [[ "$MODE" == cache ]]; then  # prefix cache: where turn 2's time goes, its TTFT at 32K, the agent bench, 27B
  timeout 150 $PY bench/profile_ttft.py --config qwen3.6-27b --history 32768 --new 200 2>&1 \
    | tee "$OUT/profile_ttft_27b.log" | head -45
  timeout 300 $PY -m hinfer bench qwen3.6-27b --prefix-ttft 32K --concurrency 1,4,8 --out "$OUT" 2>&1 \
    | tee "$OUT/bench_27b_prefix_ttft.log" | tail -20
  timeout 280 $PY -m hinfer bench qwen3.6-27b --agent --out "$OUT" 2>&1 | tee "$OUT/bench_27b_agent.log" | tail -20
fi
if [[ "$MODE" == agent ]]; then  # the agent bench alone: its cache-off pass recomputes about 2M prompt tokens
  timeout 560 $PY -m hinfer bench qwen3.6-27b --agent --out "$OUT" 2>&1 | tee "$OUT/bench_27b_agent.log" | tail -24
fi
if [[ "$MODE" == structured ]]; then  # structured output: decode tok/s with every / half / no lane on a JSON schema, 27B
  # xgrammar is not on the device image: carry its wheels in .whl (xgrammar, apache-tvm-ffi; see the header)
  $PY -c 'import xgrammar' 2>/dev/null || { echo "xgrammar missing: carry .whl (scripts/gpu_check.sh header)"; exit 1; }
  timeout 300 $PY -m hinfer bench qwen3.6-27b --structured --out "$OUT" 2>&1 | tee "$OUT/bench_27b_structured.log" \
    | tail -16
fi
if [[ "$MODE" == vision ]]; then  # vision tower per image and TTFT with one image, random weights at 27B shapes
  for q in bf16 int4; do
    timeout 200 $PY -m hinfer bench qwen3.6-27b --vision --quant $q --out "$OUT" 2>&1 \
      | tee "$OUT/bench_27b_vision_$q.log" | tail -18
  done
fi
if [[ "$MODE" == profile ]]; then
  for m in qwen3.6-27b qwen3.6-35b-a3b qwen3.5-122b-a10b; do
    for lanes in 1 8; do
      timeout 120 $PY bench/profile_decode.py --config $m --quant int4 --lanes $lanes 2>&1 \
        | tee "$OUT/profile_${m}_int4_c$lanes.log" | head -14
    done
  done
fi
