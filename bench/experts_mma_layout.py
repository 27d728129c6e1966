"""The int4 experts' decode kernel (hinfer/ops/triton/moe_int4_mma.py) on the two weight layouts it reads:
hinfer.quant.int4's rows (a thread's 16 bytes from rows g and g + 8, a warp's load 16 runs of 64 bytes) and mma
fragment order per expert (int4_mma_layout.permute_experts: one 512-byte run a warp). Each projection at the
packaged tile, timed as a CUDA graph cycling through enough layers of random int4 experts that the selected ones
come from HBM (bench/experts_mma_tiles.py's method), and checked bit for bit between the layouts on layer 0.

    python bench/experts_mma_layout.py [--model 35b 122b] [--t 1 8 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.experts_mma_tiles import BM, BW, Routing  # noqa: E402
from bench.moe_kernels import MAX_LAYER_BYTES, MODELS, _graph_us, _random_int4  # noqa: E402
from hinfer.ops.triton.moe_int4 import Int4Experts  # noqa: E402
from hinfer.ops.triton.moe_int4_mma import experts_mma  # noqa: E402
from hinfer.quant.int4_mma_layout import permute_experts  # noqa: E402


def _frag(w: Int4Experts, gate_up: bool) -> Int4Experts:
    return Int4Experts(
        permute_experts(w.qweight, w.in_features, gate_up), w.scales, w.zeros, w.in_features, True
    )


def compare(name: str, t: int, gen: torch.Generator) -> list[dict]:
    m = MODELS[name]
    e, k, h, i = m["e"] + 1, m["k"] + 1, m["h"], m["i"]  # the shared expert folded in: expert E, slot k
    per_layer = e * 3 * h * i * 0.55 * 2  # both layouts held
    n_layers = max(2, min(16, int(MAX_LAYER_BYTES // per_layer)))
    routes = [Routing(t, k, e, gen) for _ in range(n_layers)]
    pairs = t * k
    x = torch.randn(t, h, device="cuda").bfloat16()
    hid = torch.randn(pairs, i, device="cuda").bfloat16()
    out = []
    for proj, (n, kk) in (("gate_up", (2 * i, h)), ("down", (h, i))):
        rows = [_random_int4(e, n, kk, False) for _ in range(n_layers)]
        frag = [_frag(w, proj == "gate_up") for w in rows]
        y = torch.empty(pairs, i if proj == "gate_up" else h, device="cuda", dtype=torch.bfloat16)

        def run(ws: list[Int4Experts], y=y, proj=proj) -> None:
            for j in range(n_layers):
                r = routes[j]
                if proj == "gate_up":
                    experts_mma(x, ws[j], y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct, xdiv=k,
                                act=True)  # fmt: skip
                else:
                    experts_mma(hid, ws[j], y, r.blocks, BM, r.flat, r.sorted, r.bexp, r.brows, r.direct, xdiv=1,
                                tw=r.tw)  # fmt: skip

        run(rows)
        a = y.clone()
        run(frag)
        same = torch.equal(a, y)  # the last layer's output (its routing, its experts) in both layouts
        us_rows, us_frag = (_graph_us(functools.partial(run, ws), n_layers) for ws in (rows, frag))
        distinct = sum(r.distinct for r in routes) / n_layers
        floor = distinct * n * kk * (0.5 + 3 / 128) / BW * 1e6
        print(
            f"{name:5s} {proj:7s} T={t:<3d} rows {us_rows:7.2f} us ({floor / us_rows:5.1%})  fragment order "
            f"{us_frag:7.2f} us ({floor / us_frag:5.1%})  {us_rows / us_frag:5.2f}x  bit-equal {same}",
            flush=True,
        )
        out.append({"model": name, "proj": proj, "t": t, "rows_us": us_rows, "frag_us": us_frag, "floor_us": floor,
                    "bit_equal": same})  # fmt: skip
        rows = frag = []
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), nargs="*", default=["35b", "122b"])
    ap.add_argument("--t", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    print(f"seed {a.seed}")
    rows: list[dict] = []
    for name in a.model:
        for t in a.t:
            rows += compare(name, t, gen)
            if a.json:
                a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
