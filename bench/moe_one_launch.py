"""A token's routed int4 experts per MoE layer: the one-launch kernel (hinfer/ops/triton/moe_int4_one.py) against the
two launches it replaces, and its parts, at the Qwen3.5 MoE shapes.

Each arm is a CUDA graph of `moe_route_experts` over enough layers of random int4 experts (E + 1 each, the last the
folded shared expert; each layer its own router logits) that the selected experts come from HBM, with programmatic
dependent launch as the decode graph has it; us per layer, the median of do_bench_cudagraph, the arms alternated
`--rounds` times in one process. Parts: `one, no wait` (the down jobs do not wait for their pair's act rows: wrong
outputs, the wait's cost), `two, gate_up only` (the gate_up launch alone), `gate_up, ids given` (that launch reading
its experts' ids instead of routing the token: the route's cost inside it), `gate_up, warps read the row` (routing,
every warp reading the router row itself: HINFER_ROUTE_READ=warps). Byte floor: the 9 experts' int4 bytes over 4.2 TB/s.
The experts' words stripe by stripe as the engine places them (`--words rows`: as loaded).

    python bench/moe_one_launch.py [--model 35b 122b] [--layers 24] [--rounds 3] [--words stripes|rows] [--json F]
    python bench/moe_one_launch.py --sweep      # the one launch's tiles (gate_up tile, down rows) against the two

An arm that fails to compile or to fit is reported and left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.moe_kernels import BW, MODELS, _expert_bytes, _graph_us, _random_int4  # noqa: E402
from hinfer.ops.triton import moe as tm  # noqa: E402
from hinfer.ops.triton.moe_int4_mma import experts_mma  # noqa: E402
from hinfer.ops.triton.moe_int4_one import experts_one_launch, one_launch_fits, one_launch_tiles  # noqa: E402
from hinfer.ops.triton.tiles.forms import SkinnyConfig  # noqa: E402
from hinfer.quant.int4_mma_layout import stored_as  # noqa: E402

# (BLOCK_N, K splits, warps, look-ahead depth) of the gate_up jobs x the down jobs' rows a program
SWEEP = [((64, 1, 4, 4), 64), ((64, 1, 4, 2), 64), ((64, 1, 4, 4), 128), ((32, 1, 2, 4), 32), ((32, 2, 2, 4), 32),
         ((64, 2, 4, 4), 128), ((128, 1, 4, 4), 64), ((32, 1, 2, 2), 32), ((128, 4, 4, 4), 128)]


def _layers(m: dict, n: int, gen: torch.Generator, words: str = "stripes") -> list[tuple]:
    """n layers of (gate_up, down, router logits), the experts' words stored as `words`."""
    e, h, i = m["e"] + 1, m["h"], m["i"]
    out = []
    for _ in range(n):
        logits = (torch.randn(1, e, generator=gen) * 3).bfloat16().cuda()
        gu, dn = _random_int4(e, 2 * i, h, False), _random_int4(e, h, i, False)
        out.append((stored_as(gu, words, True), stored_as(dn, words, False), logits))
    return out


def arms(m: dict, layers: list[tuple], x: torch.Tensor, sweep: bool = False) -> dict:
    """name -> a function running every layer once."""
    k, h, i = m["k"], m["h"], m["i"]
    slots = k + 1
    out = torch.empty(1, h, dtype=torch.bfloat16, device="cuda")
    hid = torch.empty(slots, i, dtype=torch.bfloat16, device="cuda")
    ids = torch.empty(slots, dtype=torch.int64, device="cuda")
    tw = torch.empty(slots, dtype=torch.bfloat16, device="cuda")

    def route_experts(rows: str):
        def run():
            os.environ["HINFER_FUSION_ROWS"] = rows
            for gu, dn, logits in layers:
                tm.moe_route_experts(x, logits, gu, dn, k, shared=True)
            os.environ.pop("HINFER_FUSION_ROWS")

        return run

    def one(tiles=None, **parts):
        def run():
            for gu, dn, logits in layers:
                experts_one_launch(x, logits, gu, dn, k, out, tiles, **parts)

        return run

    if sweep:
        found = {"two": route_experts("")}
        for (bn, split, warps, depth), bn2 in SWEEP:
            cfg = SkinnyConfig(bn, 128, 8, split, warps, depth, max_regs=128)
            name = f"one {bn}x{split} w{warps} d{depth} down {bn2}"
            if one_launch_fits(x, layers[0][0], layers[0][1], slots, (cfg, bn2)):
                found[name] = one((cfg, bn2))
            else:
                print(f"  {name}: does not fit")
        return found

    def two_gate_up():
        for gu, _, logits in layers:
            experts_mma(x, gu, hid, slots, 8, ids, ids, ids, ids, True, xdiv=slots, act=True, topk=k, route=logits,
                        route_w=tw)  # fmt: skip

    def gate_up_warps_read():  # the same, every warp reading the router row itself
        os.environ["HINFER_ROUTE_READ"] = "warps"
        two_gate_up()
        os.environ.pop("HINFER_ROUTE_READ")

    routed = [tm.moe_route(logits, k, shared=True)[1].view(-1).contiguous() for _, _, logits in layers]

    def gate_up_given_ids():  # the same launch reading its pairs' experts instead of routing the token
        for (gu, _, _), r in zip(layers, routed):
            experts_mma(x, gu, hid, slots, 8, r, r, r, r, True, xdiv=slots, act=True)

    return {"two": route_experts(""), "one": route_experts("one_launch=1"), "two, gate_up only": two_gate_up,
            "gate_up, ids given": gate_up_given_ids, "gate_up, warps read the row": gate_up_warps_read,
            "one, no wait": one(WAIT=False)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), nargs="*", default=["35b"])
    ap.add_argument("--layers", type=int, default=24, help="layers of weights cycled (their experts from HBM)")
    ap.add_argument("--rounds", type=int, default=3, help="times each arm is timed, alternated")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sweep", action="store_true", help="the one launch's tiles instead of its parts")
    ap.add_argument("--words", choices=("stripes", "rows"), default="stripes", help="the experts' words as stored")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"seed 0, {torch.cuda.get_device_name()}, PDL {'off' if os.environ.get('HINFER_PDL') == '0' else 'on'}")
    rows = []
    for name in args.model:
        m = MODELS[name]
        layers = _layers(m, args.layers, gen, args.words)
        x = torch.randn(1, m["h"], generator=gen).bfloat16().cuda()
        if not one_launch_fits(x, layers[0][0], layers[0][1], m["k"] + 1):
            print(f"{name}: the one-launch grid does not fit this GPU")
            continue
        print(f"{name}: default tiles {one_launch_tiles(m['h'], m['i'], m['k'] + 1)}")
        fns = arms(m, layers, x, args.sweep)
        for a, fn in list(fns.items()):  # compile and allocate outside the timing
            try:
                fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a variant that does not compile is reported, not fatal
                print(f"  {a}: failed ({type(e).__name__}: {str(e).splitlines()[-1][:200] if str(e) else ''})")
                del fns[a]
        times: dict[str, list[float]] = {a: [] for a in fns}
        for _ in range(args.rounds):
            for a, fn in fns.items():
                times[a].append(_graph_us(fn, len(layers)))
        floor = (m["k"] + 1) * _expert_bytes(m, "int4") / BW * 1e6
        print(f"\n{name}: us per layer (median of {args.rounds} rounds; each round's in brackets), floor {floor:.2f} us")
        for a, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            med = statistics.median(ts)
            print(f"  {a:<20} {med:7.2f}  ({', '.join(f'{t:.2f}' for t in ts)})  {floor / med:5.1%} of floor")
            rows.append({"model": name, "arm": a, "us": med, "rounds": ts, "floor_us": floor})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
