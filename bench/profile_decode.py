"""Where a decode step's time goes: CUDA-graph replays of the real runner under torch.profiler, kernels summed.
With --spec-k K, a speculative round instead (MTP drafter at K, verification of K + 1 rows per lane): the round's
wall time beside its GPU busy time shows what the host adds between graphs, and the idle gaps between device
activities, by the kernels on either side, show where.

    python bench/profile_decode.py [--config qwen3.6-27b] [--lanes 1] [--depth 1024] [--layers 64] [--quant int4]
    python bench/profile_decode.py --quant int4 --spec-k 3 [--lanes 8]

Programmatic dependent launch is off here unless --pdl: with it a kernel starts early and waits for its
predecessor, and the profiler counts the wait as the kernel's time (its busy column). The exposed column is the
share of the step each kernel holds either way: how far its end moves the end of all GPU work before it (with PDL,
its latency past its predecessor's end; a kernel hidden under others adds nothing).
"""

from __future__ import annotations

import argparse
import gzip
import os
from collections import defaultdict

import torch

from hinfer.bench import floors, measure
from hinfer.bench.run import build_model, resolve_model, truncate_layers
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import tokenizer_dir
from hinfer.tokenizer import Tokenizer


def decode_core(config: str, quant: str, lanes: int, depth: int, layers: int | None = None, spec_k: int = 0,
                room: int | None = None):  # fmt: skip
    """(config, model, engine core) on the GPU: random weights in `quant`, `lanes` lanes of random KV and GDN state
    past `depth`, with the MTP drafter at K = spec_k when it is > 0; `room`: the tokens a lane may grow past
    `depth` (default: a profile's few steps or rounds)."""
    # the layer-by-layer build frees bf16 blocks that would otherwise stay reserved in pieces too small for the
    # lanes' state: the 122B-A10B ran out of an H100's 80 GB with 15.8 GB reserved and unallocated (2026-12-07)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    path, is_ckpt = resolve_model(config)
    cfg = truncate_layers(load_model_config(path), layers)
    spec = dict(spec="mtp", draft_tokens=spec_k, spec_adaptive=False) if spec_k else {}
    room = 256 + 48 * (spec_k + 1) if room is None else room
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cuda", dtype="bf16", max_concurrency=lanes,
                                                   max_context=depth + room, **spec))  # fmt: skip
    model = build_model(path, is_ckpt, cfg, quant, with_mtp=bool(spec_k))
    core = make_core(cfg, model, Tokenizer.from_dir(tokenizer_dir()), ecfg, torch.device("cuda"))
    core.runner.state.fill_random()
    return cfg, model, core


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="qwen3.6-27b")
    ap.add_argument("--lanes", type=int, default=1)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--quant", default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--spec-k", type=int, default=0, help="profile MTP speculative rounds at this K instead")
    ap.add_argument("--pdl", action="store_true", help="keep programmatic dependent launch on (kernel times then "
                    "include the waits for their predecessors)")
    ap.add_argument("--sampling", default="greedy", help="every lane sampling this way (hinfer.bench.measure.SAMPLING: "
                    "greedy, qwen, top-p, full)")
    ap.add_argument("--host", action="store_true", help="with --spec-k: also the host's Python time per round by "
                    "function (cProfile, cumulative), to tell host work from GPU work")
    ap.add_argument("--trace", default=None, help="also write the profiled steps / rounds as a Chrome trace (.json or "
                    ".json.gz) with the host's Python stacks, to read each GPU gap against the host work beside it")
    a = ap.parse_args()
    if not a.pdl:
        os.environ["HINFER_PDL"] = "0"
    cfg, model, core = decode_core(a.config, a.quant, a.lanes, a.depth, a.layers, a.spec_k)
    if a.spec_k:
        return profile_spec(core, a)
    t = measure.decode(core.runner, a.lanes, a.depth, steps=a.steps, sampling=a.sampling)
    wb = floors.weight_bytes_per_step(model)
    b = floors.decode_step_bytes(cfg, wb, a.lanes, a.depth, 2, 2)
    bw = 4.2e12
    print(f"step {t.ms_per_step:.3f} ms, floor {b.total / bw * 1e3:.3f} ms (weights {wb / 1e9:.2f} GB)")
    seqs_steps = 5
    with _profiler(a.trace) as prof:
        measure.decode(core.runner, a.lanes, a.depth, steps=seqs_steps, warmup=0)
        torch.cuda.synchronize()
    _export(prof, a.trace)
    print_kernels(prof, seqs_steps, "step")
    print_gaps(prof, seqs_steps, "step")


def _profiler(trace: str | None):
    """GPU activity only, or with --trace the host's too (its ops and Python stacks: slower, for the timeline)."""
    acts = [torch.profiler.ProfilerActivity.CUDA]
    if trace:
        acts.append(torch.profiler.ProfilerActivity.CPU)
    return torch.profiler.profile(activities=acts, with_stack=bool(trace))


def _export(prof, trace: str | None) -> None:
    if not trace:
        return
    if trace.endswith(".gz"):
        raw = trace[: -len(".gz")]
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(trace, "wb") as g:
            g.write(f.read())
        os.remove(raw)
    else:
        prof.export_chrome_trace(trace)
    print(f"trace: {trace}")


def print_gaps(prof, n: int, unit: str, top: int = 10) -> None:
    """Where the GPU waits for the host: the idle time between consecutive device activities (kernels, copies),
    per unit, and the largest kinds of gap by the kernels on either side of it (the host work between them)."""
    spans = sorted((ev.time_range.start, ev.time_range.end, ev.name[:40]) for ev in prof.events()
                   if ev.device_type == torch.autograd.DeviceType.CUDA)  # fmt: skip
    gaps: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    idle, end, before = 0.0, None, ""
    for start, stop, name in spans:
        if end is not None and start > end + 1.0:  # > 1 us without anything on the GPU
            g = gaps[(before, name)]
            g[0] += start - end
            g[1] += 1
            idle += start - end
        if end is None or stop > end:
            end, before = stop, name
    print(f"GPU idle between activities per {unit} {idle / n / 1e3:.3f} ms (gaps > 1 us)")
    print(f"{'after':40s} {'before':40s} {'us/' + unit:>9s} {'gaps/' + unit:>9s}")
    for (a, b), (us, k) in sorted(gaps.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{a:40s} {b:40s} {us / n:9.1f} {k / n:9.1f}")


def exposed_times(spans: list[tuple[float, float, str]]) -> dict[str, list[float]]:
    """[exposed us, count] per name over (start, end, name) spans: each span's end minus the later of its start and
    the latest end before it (0 when it ends under earlier work). The sum is the GPU's busy wall time."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    end = None
    for start, stop, name in sorted(spans):
        lo = start if end is None else max(start, end)
        out[name][0] += max(0.0, stop - lo)
        out[name][1] += 1
        end = stop if end is None else max(end, stop)
    return out


def print_kernels(prof, n: int, unit: str) -> None:
    agg: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    spans = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = ev.name[:70]
            agg[k][0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            agg[k][1] += 1
            spans.append((ev.time_range.start, ev.time_range.end, k))
    exposed = exposed_times(spans)
    total = sum(v[0] for v in agg.values())
    wall = sum(v[0] for v in exposed.values())
    print(f"GPU busy per {unit} {total / n / 1e3:.3f} ms (kernel times summed), {wall / n / 1e3:.3f} ms of wall")
    print(f"{'kernel':72s} {'busy us/' + unit:>13s} {'exposed':>9s} {'calls/' + unit:>10s}")
    for k, (us, calls) in sorted(agg.items(), key=lambda kv: -exposed[kv[0]][0])[:25]:
        print(f"{k:72s} {us / n:13.1f} {exposed[k][0] / n:9.1f} {calls / n:10.1f}")


def profile_spec(core, a) -> None:
    """Rounds at a fixed K (random weights: acceptance is meaningless, the round's cost is not)."""
    plain = measure.decode(core.runner, a.lanes, a.depth, steps=a.steps, sampling=a.sampling)
    t = measure.spec_rounds(core, a.lanes, a.depth, rounds=16, sampling=a.sampling)
    print(f"round {t.ms_per_round:.3f} ms at K={a.spec_k}, plain step {plain.ms_per_step:.3f} ms "
          f"({t.ms_per_round / plain.ms_per_step:.2f}x), sampling {a.sampling}")
    rounds = 5
    if a.host:
        import cProfile
        import pstats

        with cProfile.Profile() as host:
            measure.spec_rounds(core, a.lanes, a.depth, rounds=rounds * 4, warmup=0, sampling=a.sampling)
            torch.cuda.synchronize()
        print(f"host time per round by function (cumulative ms over {rounds * 4} rounds, then per round):")
        pstats.Stats(host).sort_stats("cumulative").print_stats(40)
    with _profiler(a.trace) as prof:
        measure.spec_rounds(core, a.lanes, a.depth, rounds=rounds, warmup=0, sampling=a.sampling)
        torch.cuda.synchronize()
    _export(prof, a.trace)
    print_kernels(prof, rounds, "round")
    print_gaps(prof, rounds, "round")


if __name__ == "__main__":
    main()
