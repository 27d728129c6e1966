"""Each launch of a decode step against the programs an SM can hold: its grid over the slots its registers, shared
memory and warps leave (sm_90: 16,384 registers per scheduler quarter, allocated 256 per warp; 228 KB of shared
memory, 1 KB of it reserved per program; 64 warps, 32 programs), so a grid just past a whole wave shows. A grid
of 576 programs where 528 fit ran its last 48 as a second wave, and the one-token experts gate_up held to 96
registers (five an SM) gained 1.6-2.3% of one-lane decode (bench/RESULTS.md, 2026-12-07).

    python bench/waves.py --config qwen3.6-35b-a3b --quant int4 --lanes 1
    python bench/waves.py --experts 35b --fmt int4      # no GPU: the experts' packaged tiles built for sm_90

The launches come from the CUDA-graph decode step under torch.profiler (the trace's grid, block, registers and
shared memory per kernel), programmatic dependent launch off (each kernel's own time). The grid counts every
program, also those that leave at once and free their slot (a K split's copies of the bf16 tail-row programs, an
experts grid's empty blocks): read a mark against the kernel before changing its tile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SM90 = dict(regs_quarter=16384, reg_unit=256, smem=233472, smem_reserved=1024, warps=64, programs=32)


@dataclass(frozen=True)
class Launch:
    name: str
    grid: int
    threads: int
    regs: int
    smem: int


def resident(regs: int, threads: int, smem: int, limits: dict = SM90) -> int:
    """Programs of one launch an SM holds at once: registers per scheduler quarter (a warp's registers rounded up to
    the allocation unit; a program's warps spread over the four quarters), shared memory, warps, programs."""
    warps = -(-threads // 32)
    per_warp = -(-max(regs, 1) * 32 // limits["reg_unit"]) * limits["reg_unit"]
    by_regs = 4 * (limits["regs_quarter"] // per_warp) // warps
    by_smem = limits["smem"] // (smem + limits["smem_reserved"])
    return max(0, min(by_regs, by_smem, limits["warps"] // warps, limits["programs"]))


def waves(launch: Launch, sms: int) -> float:
    slots = resident(launch.regs, launch.threads, launch.smem) * sms
    return launch.grid / slots if slots else math.inf


def past_a_wave(w: float) -> bool:
    """A last wave under a third full: its programs run nearly alone, a whole program's time for a few of them."""
    return w > 1 and 0 < w - math.floor(w) < 1 / 3


def launches(trace: dict) -> dict[Launch, list[float]]:
    """Kernel events of a Chrome trace -> [total us, count] per distinct launch shape."""
    out: dict[Launch, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in trace.get("traceEvents", []):
        args = ev.get("args", {})
        if ev.get("cat") != "kernel" or "grid" not in args:
            continue
        grid, block = args["grid"], args["block"]
        key = Launch(ev["name"][:60], grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2],
                     int(args.get("registers per thread", 0)), int(args.get("shared memory", 0)))  # fmt: skip
        out[key][0] += ev.get("dur", 0.0)
        out[key][1] += 1
    return out


def report(shapes: dict[Launch, list[float]], sms: int, steps: int) -> None:
    """Launches by time per step, with their slots and waves; `<-` marks past_a_wave."""
    print(f"{'kernel':60s} {'grid':>6s} {'thr':>4s} {'regs':>4s} {'smem':>6s} {'/SM':>3s} {'waves':>6s} "
          f"{'us/step':>8s} {'calls':>5s}")
    for ln, (us, n) in sorted(shapes.items(), key=lambda kv: -kv[1][0]):
        w = waves(ln, sms)
        mark = " <-" if past_a_wave(w) else ""
        print(f"{ln.name:60s} {ln.grid:6d} {ln.threads:4d} {ln.regs:4d} {ln.smem:6d} "
              f"{resident(ln.regs, ln.threads, ln.smem):3d} {w:6.2f} {us / steps:8.1f} {n / steps:5.1f}{mark}")


def experts_report(model: str, fmt: str, tokens: tuple[int, ...], sms: int = 132) -> None:
    """Without a GPU: each experts launch of a MoE model's decode at these token counts, as its packaged tile builds
    for sm_90 (linear_aot; the block form the decode takes: a block per pair up to three tokens, routed in the
    launch, else the alignment's blocks), against the slots its build leaves. Programs: blocks x column tiles x K
    splits, the blocks the expected distinct experts of uniform routing plus the shared expert's (a grouped grid
    is sized for the worst case; its empty blocks leave at once). Real routing picks fewer distinct experts than
    uniform: from four tokens the waves are the random-weight bench's, not a real model's."""
    from bench.moe_kernels import MODELS
    from hinfer.ops.triton.linear_aot import _experts_variant, compile_gluon_sm90, resources
    from hinfer.ops.triton.linear_int4_mma import staged_where_fits, x_stage_shape
    from hinfer.ops.triton.moe_fp8_mma import fp8_experts_variant
    from hinfer.ops.triton.tiles.moe import experts_mma_tile, fp8_experts_mma_tile

    m = MODELS[model]
    e, k, h, i = m["e"], m["k"], m["h"], m["i"]
    print(f"{model} {fmt} experts, {sms} SMs")
    print(f"{'T':>2s} {'proj':7s} {'tile':34s} {'regs':>4s} {'stack':>5s} {'smem':>6s} {'/SM':>3s} {'programs':>8s} "
          f"{'waves':>6s}")
    for t in tokens:
        pairs, direct = t * (k + 1), t <= 3
        blocks = pairs if direct else e * (1 - (1 - k / e) ** t) + -(-t // 8)
        for proj, (n, kk) in (("gate_up", (2 * i, h)), ("down", (h, i))):
            gate_up = proj == "gate_up"
            if fmt == "fp8":
                c = fp8_experts_mma_tile(pairs, n, kk, round(blocks), sms=sms)
                xg, xr = x_stage_shape(staged_where_fits(c, kk, direct) if c.x_staged else c, kk, direct)
                name, fn, sig, cex, warps = fp8_experts_variant(
                    c.block_n, c.num_warps, not direct, direct, k + 1 if gate_up else 1, not gate_up,
                    depth=c.num_stages, pdl=True, split=c.split_k, act=gate_up, max_regs=c.max_regs, xg=xg, xr=xr,
                    route=k if gate_up and direct else 0)  # fmt: skip
                cap = {}
            else:
                c = experts_mma_tile(pairs, n, kk, round(blocks), sms=sms)
                name, fn, sig, cex, warps, _ = next(_experts_variant(c, n, kk, direct, gate_up, set()))
                cap = {"maxnreg": c.max_regs} if c.max_regs else {}
            r = resources(compile_gluon_sm90(fn, sig, cex | cap, warps))
            programs = blocks * (n // c.block_n) * c.split_k
            per_sm = resident(r["regs"], 32 * warps, r["smem"])
            w = programs / (per_sm * sms)
            tile = f"{c.block_n} rows, {warps} warps, split {c.split_k}, cap {c.max_regs}"
            mark = " <-" if past_a_wave(w) else ""
            print(f"{t:2d} {proj:7s} {tile:34s} {r['regs']:4d} {r['stack']:5d} {r['smem']:6d} {per_sm:3d} "
                  f"{programs:8.0f} {w:6.2f}{mark}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", choices=["35b", "122b"], help="no GPU: the experts' packaged tiles (--fmt, --tokens)")
    ap.add_argument("--fmt", choices=["int4", "fp8"], default="int4", help="with --experts: their weight format")
    ap.add_argument("--tokens", default="1,2,3,4,8,32", help="with --experts: tokens a launch takes (lanes, or lanes "
                    "x (K + 1))")
    ap.add_argument("--sms", type=int, default=132, help="with --experts: the GPU's SMs")
    ap.add_argument("--config", default="qwen3.6-27b")
    ap.add_argument("--quant", default="int4")
    ap.add_argument("--lanes", type=int, default=1)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=None)
    a = ap.parse_args()
    if a.experts:
        return experts_report(a.experts, a.fmt, tuple(int(v) for v in a.tokens.split(",")), a.sms)
    os.environ["HINFER_PDL"] = "0"
    import torch

    from bench.profile_decode import decode_core
    from hinfer.bench import measure

    _, _, core = decode_core(a.config, a.quant, a.lanes, a.depth, a.layers)
    measure.decode(core.runner, a.lanes, a.depth, steps=8)
    steps = 3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        measure.decode(core.runner, a.lanes, a.depth, steps=steps, warmup=0)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(f"{d}/trace.json")
        with open(f"{d}/trace.json") as f:
            trace = json.load(f)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = launches(trace)
    if not shapes:
        raise SystemExit("no kernel event in the trace carries its grid and registers")
    print(f"{a.config} {a.quant}, {a.lanes} lane(s), {sms} SMs")
    report(shapes, sms, steps)


if __name__ == "__main__":
    main()
