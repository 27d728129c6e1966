"""Where a second turn's first-token time goes: turn 1 (the history) is prefilled and cached, then turn 2 (history
+ new tokens) is timed step by step and profiled: wall time of `add` and of each engine step, the GPU kernels
summed, and the host-side torch ops by self time.

    python bench/profile_ttft.py [--config qwen3.6-27b] [--history 32768] [--new 200] [--quant bf16]
    python bench/profile_ttft.py --config PATH_TO_TINY_CONFIG_DIR --device cpu --history 2048   # smoke run
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from hinfer.bench import measure
from hinfer.bench.prefix_ttft import PrefixTtftSpec, Prompts, engine_configs
from hinfer.bench.run import build_model, resolve_model, truncate_layers
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.factory import make_core
from hinfer.engine.protocol import GenerationRequest
from hinfer.fixtures import tokenizer_dir
from hinfer.sampling_params import SamplingParams
from hinfer.tokenizer import Tokenizer


def timed_turn(core: EngineCore, rid: str, prompt: list[int], dev: torch.device) -> list[tuple[str, float]]:
    """One greedy one-token request, stepped to the end: [(phase, ms)] for `add` and each step."""
    measure.sync(dev)
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    phases = []
    t0 = time.perf_counter()
    core.add(GenerationRequest(rid, list(prompt), params))
    phases.append(("add", time.perf_counter() - t0))
    done = False
    while not done:
        t1 = time.perf_counter()
        events = core.step()
        measure.sync(dev)
        phases.append((f"step {len(phases)}", time.perf_counter() - t1))
        done = any(ev.finish_reason for ev in events)
    return [(p, s * 1e3) for p, s in phases]


def kernel_table(prof, device_type: torch.autograd.DeviceType, top: int) -> list[str]:
    agg: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == device_type:
            key = ev.name[:70]
            agg[key][0] += ev.self_device_time_total if device_type == torch.autograd.DeviceType.CUDA else ev.self_cpu_time_total
            agg[key][1] += 1
    rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]
    total = sum(v[0] for v in agg.values())
    return [f"total {total / 1e3:.2f} ms"] + [f"{k:72s} {us / 1e3:9.2f} ms {n:7d}" for k, (us, n) in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="qwen3.6-27b")
    ap.add_argument("--history", type=int, default=32768)
    ap.add_argument("--new", type=int, default=200)
    ap.add_argument("--quant", default="bf16")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    dev = torch.device(a.device)
    spec = PrefixTtftSpec(model=a.config, history_tokens=a.history, new_tokens=a.new, repeats=2, concurrency=[1],
                          decode_prompt=16, decode_steps=1, weights=a.quant)  # fmt: skip
    path, is_ckpt = resolve_model(a.config)
    cfg = truncate_layers(load_model_config(path), a.layers)
    tok = Tokenizer.from_dir(tokenizer_dir())
    prompts = Prompts(spec, min(cfg.vocab_size, tok.vocab_size))
    cfg, on_cfg, _ = engine_configs(cfg, EngineConfig(device=a.device, page_size=64), spec, dev)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    core = make_core(cfg, build_model(path, is_ckpt, cfg, a.quant, dev=dev, dtype=dtype), tok, on_cfg, dev)
    # warm-up (compilation) on other ids, then the measured history cached by a cold turn 1
    timed_turn(core, "warm1", prompts.warm_history, dev)
    timed_turn(core, "warm2", prompts.warm_history + prompts.warm_tails[0], dev)
    core.clear_prefix_cache()
    print("turn 1 (cold):", ", ".join(f"{p} {ms:.1f} ms" for p, ms in timed_turn(core, "t1", prompts.history, dev)))
    turn2 = prompts.history + prompts.tails["gpu"][0]
    print("turn 2 (cached):", ", ".join(f"{p} {ms:.1f} ms" for p, ms in timed_turn(core, "t2a", turn2, dev)))
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        phases = timed_turn(core, "t2b", prompts.history + prompts.tails["gpu"][1], dev)
    print("turn 2 (cached, profiled):", ", ".join(f"{p} {ms:.1f} ms" for p, ms in phases))
    if dev.type == "cuda":
        print("\nGPU kernels (self time, calls)")
        print("\n".join(kernel_table(prof, torch.autograd.DeviceType.CUDA, a.top)))
    print("\nhost ops (self CPU time, calls)")
    print("\n".join(kernel_table(prof, torch.autograd.DeviceType.CPU, a.top)))


if __name__ == "__main__":
    main()
