"""Where a prefill's time goes: one prompt through the real runner in chunks, under torch.profiler, kernels summed
by name and by kind (the projections' GEMMs, their activation quantization or weight dequantization, attention,
the GDN layers, norms and the rest), beside the FLOP floor of the prompt.

    python bench/profile_prefill.py [--config qwen3.6-27b] [--quant fp8|int4|bf16] [--prompt 8192] [--chunk 8192]
                                    [--layers N] [--kv-dtype bf16]

Set the switches the run should see in the environment (HINFER_INT4_PREFILL, HINFER_PREFILL_CUDNN, ...). The
kinds are matched on kernel names (`KINDS`, first match wins); a kernel no pattern names lands in "other", listed
by name below the table.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch

from hinfer.bench import floors, measure
from hinfer.bench.run import active_params, build_model, resolve_model, truncate_layers
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import tokenizer_dir
from hinfer.tokenizer import Tokenizer

# (kind, pattern on the kernel's name), first match wins: our Triton kernels by their names (the profiler gives no
# module), cuBLAS / cuDNN by theirs
KINDS = (
    ("attention", r"^_?prefill_kernel|^_?merge_kernel|_read_kv_kernel|^read_kernel|_combine_kernel|^_?decode_kernel"
                  r"|qk_norm_rope|_sigmoid_gate|cudnn|sdpa|flash|fmha|attention"),
    ("gdn", r"^_(conv|gating|prep|state|out|recurrent|fused)_kernel|gdn|delta"),
    ("quantize / dequantize", r"_act_quant|_quantize_kernel|dequant|int4_mma_rows|_q8_codes"),
    ("gemm", r"gemm|gemv|xmma|cutlass|cublas|nvjet|skinny|mma|matmul"),
    ("norm / activation", r"norm|silu|swiglu|rope"),
    ("copies / elementwise", r"copy|cat|index|scatter|gather|elementwise|fill|memcpy|memset|reduce"),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen3.6-27b")
    ap.add_argument("--quant", default="bf16")
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--chunk", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--kv-dtype", default="bf16")
    a = ap.parse_args()
    path, is_ckpt = resolve_model(a.config)
    cfg = truncate_layers(load_model_config(path), a.layers)
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cuda", dtype="bf16", max_concurrency=1,
                                                   max_context=a.prompt + 256, prefill_chunk=a.chunk,
                                                   kv_dtype=a.kv_dtype))  # fmt: skip
    model = build_model(path, is_ckpt, cfg, a.quant, with_mtp=False)
    core = make_core(cfg, model, Tokenizer.from_dir(tokenizer_dir()), ecfg, torch.device("cuda"))
    measure.fill_random(core.runner)
    t = measure.prefill(core.runner, a.prompt, a.chunk, repeats=1)  # compiles, then one timed run
    flops = floors.prefill_flops(cfg, active_params(model), a.prompt)
    print(f"prefill {a.prompt} tokens in chunks of {a.chunk}: {t.tok_s:,.0f} tok/s, {t.ms_per_step:.1f} ms "
          f"({flops / (t.ms_per_step * 1e-3) / 1e12:.0f} TFLOP/s of the prompt's {flops / 1e12:.1f} TFLOP)")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        measure.prefill(core.runner, a.prompt, a.chunk, repeats=1, warmup=False)
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = ev.name[:90]
            by_name[k][0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            by_name[k][1] += 1
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for k, (us, n) in by_name.items():
        by_kind[kind_of(k)][0] += us
        by_kind[kind_of(k)][1] += n
    total = sum(v[0] for v in by_name.values())
    print(f"GPU busy {total / 1e3:.1f} ms (kernel times summed) against {t.ms_per_step:.1f} ms of wall")
    print(f"{'kind':24s} {'ms':>9s} {'share':>7s} {'launches':>9s}")
    for kind, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:24s} {us / 1e3:9.2f} {us / total:7.1%} {n:9d}")
    print(f"\n{'kernel':92s} {'ms':>9s} {'launches':>9s} kind")
    for k, (us, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"{k:92s} {us / 1e3:9.2f} {n:9d} {kind_of(k)}")


if __name__ == "__main__":
    main()
