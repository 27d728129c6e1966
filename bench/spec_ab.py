"""An A/B of a host-side switch on speculative rounds in one process: the engine is built once and windows of
rounds alternate between the switch's values, so the comparison does not carry the spread between processes
(5-25% for the same round on an H100, bench/RESULTS.md). Only for switches read at every round and not baked
into captured graphs (HINFER_SPEC_CHAIN, HINFER_SPEC_PICKS_KERNEL, HINFER_SAMPLER_KERNEL).

    python bench/spec_ab.py --config qwen3.6-35b-a3b --quant int4 --env HINFER_SPEC_CHAIN=1,0 [--lanes 1,8]
        [--spec-k 3] [--rounds 32] [--reps 4] [--sampling greedy]

Each window's figure is its median round (measure.spec_rounds); per value the median of its windows, and the
ratio to the first value.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from hinfer.bench import measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.profile_decode


def alternate(core, name: str, values: list[str], lanes: int, depth: int, rounds: int, reps: int,
              sampling: str = "greedy") -> dict[str, list[float]]:  # fmt: skip
    """value -> its windows' median rounds (ms), the values taking turns `reps` times; the variable is restored."""
    before = os.environ.get(name)
    out: dict[str, list[float]] = {v: [] for v in values}
    try:
        for _ in range(reps):
            for v in values:
                os.environ[name] = v
                t = measure.spec_rounds(core, lanes, depth, rounds=rounds, warmup=2, sampling=sampling)
                out[v].append(t.ms_per_round)
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="qwen3.6-35b-a3b")
    ap.add_argument("--quant", default="int4")
    ap.add_argument("--env", required=True, help="NAME=A,B[,...]: the switch and the values to alternate")
    ap.add_argument("--lanes", default="1,8")
    ap.add_argument("--spec-k", type=int, default=3)
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=32)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--sampling", default="greedy", choices=sorted(measure.SAMPLING))
    a = ap.parse_args()
    name, _, vals = a.env.partition("=")
    values = vals.split(",")
    lanes = [int(x) for x in a.lanes.split(",")]
    steps = (a.rounds + 3) * (a.spec_k + 1) * a.reps * len(values) + 64
    from bench.profile_decode import decode_core

    _, _, core = decode_core(a.config, a.quant, max(lanes), a.depth, spec_k=a.spec_k, room=steps + 256)
    for n in lanes:
        res = alternate(core, name, values, n, a.depth, a.rounds, a.reps, a.sampling)
        base = statistics.median(res[values[0]])
        for v in values:
            med = statistics.median(res[v])
            windows = " ".join(f"{x:.3f}" for x in res[v])
            print(f"{a.config} {a.quant} K={a.spec_k} lanes={n} {name}={v}: round {med:.3f} ms "
                  f"({med / base:.3f}x of {name}={values[0]}; windows {windows})", flush=True)


if __name__ == "__main__":
    main()
