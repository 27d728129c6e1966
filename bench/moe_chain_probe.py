"""Where a one-token int4 launch spends its time: each program stamps its SM clock at six points (entry, PDL wait
done, expert known, k loop done, K-split epilogue done, end; hinfer.ops.triton.mma_common.probe_stamp) and the global
timer at entry and end, in a CUDA graph of `--layers` launches chained with programmatic dependent launch as the
decode graph has them (each layer its own random weights, so they come from HBM). Arms: the MoE layer's experts
gate_up launch `routing` the token or given its experts' `ids`; `dense`, the GDN layer's int4 input and output
projections at one row (hinfer/ops/triton/linear_int4_mma.py, the packaged tiles; its wait is inside the loop,
after the first weights: its first three points are the entry); `x ahead`, the same tiles loading each group's x
with its weights (without, each group's x comes from L2 after the group before it has been multiplied); `x
staged`, the same tiles reading the program's groups of x once into shared memory (x_staged). Per arm, the chain's
time a launch (CUDA events around a replay, the stamps kept), and per
point: the median over layers of the median / 90th percentile / latest program, in us from the launch's first
program entry (cycles turned into time at the clock rate the global timer gives), and the gap from the previous
launch's last program end to this one's first wait done (entry for `dense`): what PDL leaves between them.

With `--tokens 8 32` the experts' gate_up and down at those token counts too (the pairs grouped by expert, as the
decode graph has them past one token): each program's k loop and the selected experts' bytes a second over the
launch, to tell a launch short of bandwidth by its programs' streaming from one short by its waves' tails.

    python bench/moe_chain_probe.py [--model 35b] [--layers 24] [--replays 5] [--tokens 8 32 [--only-tokens]]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.moe_kernels import MODELS, _expert_bytes, _random_int4  # noqa: E402
from hinfer.ops.triton import moe as tm  # noqa: E402
from hinfer.ops.triton.mma_common import PROBE_LAST, PROBE_POINTS  # noqa: E402
from hinfer.ops.triton.moe_int4_mma import experts_mma  # noqa: E402
from hinfer.ops.triton.tiles.forms import SkinnyConfig  # noqa: E402
from hinfer.ops.triton.tiles.moe import experts_mma_tile  # noqa: E402
from hinfer.quant.int4_mma_layout import stored_as  # noqa: E402

LAST, STAMPS = int(PROBE_LAST.value), int(PROBE_POINTS.value)
POINTS = ("entry", "waited", "expert known", "k loop done", "epilogue done", "end")


def _layers(m: dict, n: int, gen: torch.Generator, words: str = "stripes") -> list[tuple]:
    """n layers of (gate_up, down, router logits), the experts' words stored as `words`."""
    e, h, i = m["e"] + 1, m["h"], m["i"]
    out = []
    for _ in range(n):
        logits = (torch.randn(1, e, generator=gen) * 3).bfloat16().cuda()
        gu, dn = _random_int4(e, 2 * i, h, False), _random_int4(e, h, i, False)
        out.append((stored_as(gu, words, True), stored_as(dn, words, False), logits))
    return out


def timeline(probe: torch.Tensor) -> dict:
    """One launch's stamps [programs, STAMPS] -> point -> each working program's time in ns from the launch's
    first entry (programs that never reached the last stamp left out), and the launch's first entry and last end
    on the global timer (ints: its nanoseconds since the epoch pass what a double holds exactly)."""
    p = probe.cpu()
    p = p[p[:, LAST] != 0]
    start = int(p[:, LAST + 1].min())
    g0, g1 = (p[:, LAST + 1] - start).double(), (p[:, LAST + 2] - start).double()
    c = (p[:, : LAST + 1] - p[:, :1]).double()  # each program's cycles since its own entry
    ns_per_cycle = ((g1 - g0) / c[:, LAST].clamp(min=1)).median()  # one rate for all: the timer's ticks are coarse
    out: dict = {name: (g0 + c[:, i] * ns_per_cycle).tolist() for i, name in enumerate(POINTS)}
    out["end (timer)"] = g1.tolist()
    out["_start"], out["_end"] = start, start + int(g1.max())
    return out


def stats(v: list[float]) -> tuple[float, float, float]:
    s = sorted(v)
    return s[len(s) // 2] / 1e3, s[int(len(s) * 0.9)] / 1e3, s[-1] / 1e3


def with_x(cfg: SkinnyConfig, x: str) -> SkinnyConfig:
    """The tile as the arm reads x: `tile` as packaged, `ahead` each group's x loaded with its weights (registers
    uncapped), `staged` the program's groups of x read once into shared memory."""
    if x == "ahead":
        return replace(cfg, x_ahead=True, x_staged=False, max_regs=0)
    if x == "staged":
        return replace(cfg, x_staged=True, x_ahead=False, ring_pairs=False)
    return cfg


def experts_chain(m: dict, layers: list, x: torch.Tensor, given_ids: bool, x_mode: str = "tile"):
    """launch(j, probe): layer j's experts gate_up at one token, routing or given its ids, on the packaged tile
    reading x as `x_mode` says (with_x); and the launch count."""
    k, i = m["k"], m["i"]
    slots = k + 1
    hid = torch.empty(slots, i, dtype=torch.bfloat16, device="cuda")
    ids = torch.empty(slots, dtype=torch.int64, device="cuda")
    tw = torch.empty(slots, dtype=torch.bfloat16, device="cuda")
    routed = [tm.moe_route(lg, k, shared=True)[1].view(-1).contiguous() for _, _, lg in layers]
    gu0 = layers[0][0]
    cfg = experts_mma_tile(slots, gu0.shape[1], gu0.shape[2], slots)
    cfg = with_x(cfg, x_mode)

    def launch(j: int, probe: torch.Tensor) -> None:
        gu, _, logits = layers[j]
        if given_ids:
            r = routed[j]
            experts_mma(x, gu, hid, slots, 8, r, r, r, r, True, xdiv=slots, act=True, cfg=cfg, probe=probe)
        else:
            experts_mma(x, gu, hid, slots, 8, ids, ids, ids, ids, True, xdiv=slots, act=True, topk=k, route=logits,
                        route_w=tw, cfg=cfg, probe=probe)  # fmt: skip

    return launch, len(layers)


def tokens_chain(m: dict, n: int, tokens: int, part: str, gen: torch.Generator):
    """launch(j, probe): layer j's experts `part` (gate_up or down) at `tokens` tokens, the pairs grouped by expert
    as the decode graph groups them past one token (moe_align's blocks, made before the chain: the launch alone is
    probed), each layer its own random weights and router logits; the launch count, and the selected experts'
    bytes a layer (the distinct experts' `part`: two thirds of an expert's words, scales and zeros for gate_up,
    a third for down)."""
    from hinfer.ops.triton.moe_align import align

    e, k, h, i = m["e"] + 1, m["k"], m["h"], m["i"]
    slots, pairs = k + 1, tokens * (k + 1)
    layers, nbytes = [], []
    for _ in range(n):
        w = _random_int4(e, 2 * i, h, False) if part == "gate_up" else _random_int4(e, h, i, False)
        logits = (torch.randn(tokens, e, generator=gen) * 3).bfloat16().cuda()
        top_w, top_i = tm.moe_route(logits, k, shared=True)
        layers.append((w, top_w.reshape(-1).contiguous(), top_i.reshape(-1).contiguous(),
                       align(top_i, e, tm.EXPERTS_BLOCK_M)))  # fmt: skip
        nbytes.append(top_i.unique().numel() * _expert_bytes(m, "int4") * (2 if part == "gate_up" else 1) / 3)
    x = torch.randn(tokens, h, generator=gen).bfloat16().cuda()
    hid = torch.randn(pairs, i, generator=gen).bfloat16().cuda()
    out = torch.empty(pairs, i if part == "gate_up" else h, dtype=torch.bfloat16, device="cuda")

    def launch(j: int, probe: torch.Tensor) -> None:
        w, tw, ids, al = layers[j]
        bm = tm.EXPERTS_BLOCK_M
        if part == "gate_up":
            experts_mma(x, w, out, al.n_blocks, bm, ids, al.sorted, al.bexp, al.brows, False, xdiv=slots, act=True,
                        probe=probe)  # fmt: skip
        else:
            experts_mma(hid, w, out, al.n_blocks, bm, ids, al.sorted, al.bexp, al.brows, False, xdiv=1, tw=tw,
                        topk=slots, probe=probe)  # fmt: skip

    return launch, n, statistics.median(nbytes)


def dense_chain(config: str, layers: int, gen: torch.Generator, x_mode: str = "tile"):
    """launch(j, probe): the GDN input projection (even j) or output projection (odd j) of layer j // 2 at one row,
    each layer its own random int4 weights, on the packaged tile reading x as `x_mode` says (with_x)."""
    from bench.linear_kernels import config_shapes, make_weight
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.linear import mma_config

    shapes = {name: (n, k) for name, n, k in config_shapes(config)}
    pair = [shapes["gdn_in"], shapes["gdn_out"]]
    weights = [make_weight("int4-mma", n, k, gen)[0] for _ in range(layers // 2) for n, k in pair]
    xs = [torch.randn(1, k, device="cuda").bfloat16() for _, k in pair]
    cfgs = [mma_config(1, n, k) for n, k in pair]
    cfgs = [with_x(c, x_mode) for c in cfgs]

    def launch(j: int, probe: torch.Tensor) -> None:
        int4_mma_matmul(xs[j % 2], weights[j], cfg=cfgs[j % 2], probe=probe)

    return launch, len(weights)


def run_arm(launch, n: int, replays: int, nbytes: float = 0.0) -> dict:
    grid_programs = 65536  # more than any probed tile's grid (the 122B-A10B gate_up at 32 tokens: 16,640); unused rows stay zero
    probes = [torch.zeros(grid_programs, STAMPS, dtype=torch.int64, device="cuda") for _ in range(n)]

    def chain():
        for j in range(n):
            launch(j, probes[j])

    chain()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for _ in range(replays):
        for p in probes:
            p.zero_()
        graph.replay()
    torch.cuda.synchronize()
    lines = [timeline(p) for p in probes]
    start, end, per_launch = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(replays * 4):  # the whole chain's time a launch (CUDA events around a replay; stamps kept)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_launch.append(start.elapsed_time(end) * 1e3 / n)
    rows = {}
    for name in (*POINTS, "end (timer)"):
        per_layer = [stats(t[name]) for t in lines[2:]]  # the first layers wait on the zeroing kernels
        rows[name] = tuple(statistics.median(s[c] for s in per_layer) for c in range(3))
    gaps = [((lines[j]["_start"] - lines[j - 1]["_end"]) + min(lines[j]["waited"])) / 1e3
            for j in range(3, len(lines))]  # fmt: skip
    spans = [(t["_end"] - t["_start"]) / 1e3 for t in lines[2:]]
    # each working program's k loop (expert known -> k loop done), the median over layers of its median
    loops = [stats([b - a for a, b in zip(t["expert known"], t["k loop done"])]) for t in lines[2:]]
    out = {"points": rows, "gap_us": statistics.median(gaps), "span_us": statistics.median(spans),
           "programs": len(lines[-1]["entry"]), "per_launch_us": statistics.median(per_launch),
           "k_loop_us": tuple(statistics.median(s[c] for s in loops) for c in range(3))}  # fmt: skip
    if nbytes:  # the selected experts' bytes over the launch's span and over its time in the chain
        out["gb_per_s_span"] = nbytes / out["span_us"] / 1e3
        out["gb_per_s_chain"] = nbytes / out["per_launch_us"] / 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="35b")
    ap.add_argument("--layers", type=int, default=24, help="layers of weights chained (their experts from HBM)")
    ap.add_argument("--replays", type=int, default=5, help="graph replays before the stamps are read")
    ap.add_argument("--tokens", type=int, nargs="*", default=[],
                    help="also the experts' gate_up and down at these token counts, the pairs grouped by expert")
    ap.add_argument("--only-tokens", action="store_true", help="only the --tokens arms")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"seed 0, {torch.cuda.get_device_name()}, {args.model}, {args.layers} layers")
    m = MODELS[args.model]
    layers = _layers(m, args.layers, gen)
    x = torch.randn(1, m["h"], generator=gen).bfloat16().cuda()
    config = {"35b": "qwen3.6-35b-a3b", "122b": "qwen3.5-122b-a10b"}[args.model]
    dense_gen = torch.Generator(device="cuda").manual_seed(0)
    arms = {"routing": experts_chain(m, layers, x, False), "ids given": experts_chain(m, layers, x, True),
            "routing, x ahead": experts_chain(m, layers, x, False, "ahead"),
            "routing, x staged": experts_chain(m, layers, x, False, "staged"),
            "dense": dense_chain(config, args.layers, dense_gen),
            "dense, x ahead": dense_chain(config, args.layers, dense_gen, "ahead"),
            "dense, x staged": dense_chain(config, args.layers, dense_gen, "staged")}  # fmt: skip
    if args.only_tokens:
        arms = {}
    for t in args.tokens:  # built when run: a 122B-A10B layer's experts are 0.8 GB (gate_up)
        for part in ("gate_up", "down"):
            arms[f"{t} tokens, {part}"] = functools.partial(tokens_chain, m, args.layers, t, part, gen)
    out = {}
    for arm, chain in arms.items():
        launch, n, *nbytes = chain() if callable(chain) else chain
        r = run_arm(launch, n, args.replays, *nbytes)
        del launch
        torch.cuda.empty_cache()
        out[arm] = r
        print(f"\n{arm}: {r['programs']} programs, a launch every {r['per_launch_us']:.2f} us in the chain; a layer's span {r['span_us']:.2f} us (first entry to last end), "
              f"previous layer's last end to this one's first wait done {r['gap_us']:.2f} us")  # fmt: skip
        print("  a program's k loop: median / p90 / longest {:.2f} / {:.2f} / {:.2f} us".format(*r["k_loop_us"]))
        if "gb_per_s_span" in r:
            print(f"  selected experts' bytes {nbytes[0] / 1e6:.1f} MB: {r['gb_per_s_span']:.0f} GB/s over the span, "
                  f"{r['gb_per_s_chain']:.0f} GB/s a launch in the chain")  # fmt: skip
        print(f"  {'us from the first entry':<24} {'median':>7} {'p90':>7} {'last':>7}")
        for name, (med, p90, last) in r["points"].items():
            print(f"  {name:<24} {med:7.2f} {p90:7.2f} {last:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
