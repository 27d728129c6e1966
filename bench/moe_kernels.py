"""Micro-benchmark of the MoE Triton kernels (router + routed experts) at the Qwen3.5 MoE shapes on one GPU.

    python bench/moe_kernels.py                        # 35B-A3B and 122B-A10B, decode and prefill, ratio table
    python bench/moe_kernels.py --model 35b --t 1 8    # a subset
    python bench/moe_kernels.py --sweep --t 1 8 64 2048  # also sweep the tiles: the best per shape as TUNED
                                                         # entries (--tuned-out t.json: for HINFER_TILES)
    python bench/moe_kernels.py --profile --t 1 8      # per-kernel times of one layer (torch.profiler)
    python bench/moe_kernels.py --pdl --t 1 8 64       # decode also without programmatic dependent launch

Decode rows (T <= 64) are medians of CUDA-graph replays cycling through enough layers (each with its own
expert weights and its own routing) that the selected experts come from HBM, not L2, as in the real model;
figures are per layer. Byte floor = (distinct experts selected x 3*H*I*2 bytes + x and out (+ logits for the
router)) / 4.2e12 B/s. Prefill rows use do_bench (median, L2 flushed); FLOP floor = 2*T*k*3*H*I / 750e12 FLOP/s
(the bf16 cuBLAS 8192^3 rate of the design brief), next to cuBLAS doing the same FLOPs as two plain GEMMs.
The ratio table (floor / measured) comes last.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path

import torch
import triton
import triton.testing

from hinfer.ops.triton import moe as tm
from hinfer.ops.triton.moe import Fp8Experts
from hinfer.ops.triton.moe_int4 import Int4Experts
from hinfer.ops.triton.tiles.forms import GEMV, MoeConfig, Tile
from hinfer.ops.triton.tiles.moe import BF16, FP8, INT4, MOE, pick_config
from hinfer.ops.triton.tiles.table import entry, m_bucket, source_line, write

BW = 4.2e12
PEAK = 750e12
MODELS = {"35b": dict(e=256, k=8, h=2048, i=512), "122b": dict(e=256, k=8, h=3072, i=1024)}
DECODE_T = (1, 2, 4, 8, 16, 32, 64)
PREFILL_T = (512, 2048, 8192)
MAX_LAYER_BYTES = 24e9  # weights allocated for the decode rows (cycled so they come from HBM)
SWEPT: list[dict] = []  # the sweep's winners as tile table entries (--tuned-out)


class Layers:
    """n layers of expert weights, random: bf16 scaled so outputs are ~1, or int4 (random words and scales,
    hinfer.quant.int4 layout per expert; zero points unless sym)."""

    def __init__(self, m: dict, n: int, fmt: str = BF16, sym: bool = False) -> None:
        e, h, i = m["e"], m["h"], m["i"]
        if fmt == BF16:
            self.gu = [
                torch.randn(e, 2 * i, h, device="cuda", dtype=torch.bfloat16) * h**-0.5 for _ in range(n)
            ]
            self.dn = [torch.randn(e, h, i, device="cuda", dtype=torch.bfloat16) * i**-0.5 for _ in range(n)]
        elif fmt == FP8:
            self.gu = [_random_fp8(e, 2 * i, h) for _ in range(n)]
            self.dn = [_random_fp8(e, h, i) for _ in range(n)]
        else:
            self.gu = [_random_int4(e, 2 * i, h, sym) for _ in range(n)]
            self.dn = [_random_int4(e, h, i, sym) for _ in range(n)]


def _random_int4(e: int, n: int, k: int, sym: bool) -> Int4Experts:
    q = torch.randint(-(2**31), 2**31 - 1, (e, n, k // 8), dtype=torch.int32, device="cuda")
    g = -(-k // 128)
    s = (torch.rand(e, n, g, device="cuda") * 0.02 / k**0.5).bfloat16()
    z = None if sym else torch.randint(0, 16, (e, n, g), dtype=torch.uint8, device="cuda")
    return Int4Experts(q, s, z, k)


def _random_fp8(e: int, n: int, k: int) -> Fp8Experts:
    """e4m3 values and 128x128 block scales (the official FP8 layout), outputs ~1."""
    w = torch.randn(e, n, k, device="cuda").to(torch.float8_e4m3fn)
    s = torch.full((e, -(-n // 128), -(-k // 128)), k**-0.5, device="cuda")
    return Fp8Experts(w, s, True)


def _routing(t: int, m: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = torch.randn(t, m["e"], device="cuda").bfloat16()
    w, ids = tm.moe_route(logits, m["k"])
    return logits, w, ids


def _graph_us(fn, n: int) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3 / n


def _expert_bytes(m: dict, fmt: str = BF16, sym: bool = False) -> float:
    """Bytes of one expert (gate, up, down): bf16, fp8 + fp32 128x128 block scales, or int4 words + bf16 scales
    (+ uint8 zeros) per 128."""
    n = 3 * m["h"] * m["i"]
    if fmt == FP8:
        return n + n / (128 * 128) * 4
    return n * 2 if fmt == BF16 else n / 2 + n / 128 * (2 if sym else 3)


def decode(m: dict, t: int, layers: Layers, cfg: MoeConfig | None = None, routes: list | None = None) -> dict:
    """us per layer: route, experts, both (cfg None), or experts only; and the byte floors."""
    n = len(layers.gu)
    x = torch.randn(t, m["h"], device="cuda").bfloat16()
    routes = routes or [_routing(t, m) for _ in range(n)]
    distinct = statistics.mean(torch.unique(r[2]).numel() for r in routes)
    fmt = BF16 if isinstance(layers.gu[0], torch.Tensor) else FP8 if isinstance(layers.gu[0], Fp8Experts) else INT4
    sym = fmt == INT4 and layers.gu[0].zeros is None
    act_bytes = 2 * t * m["h"] * 2

    def experts():
        for j in range(n):
            tm.moe_experts(x, layers.gu[j], layers.dn[j], routes[j][1], routes[j][2], config=cfg)

    def route():
        for j in range(n):
            tm.moe_route(routes[j][0], m["k"])

    def both():
        for j in range(n):
            w, ids = tm.moe_route(routes[j][0], m["k"])
            tm.moe_experts(x, layers.gu[j], layers.dn[j], w, ids, config=cfg)

    out = {"distinct": distinct, "experts": _graph_us(experts, n), "floor_experts": 0.0}
    out["floor_experts"] = (distinct * _expert_bytes(m, fmt, sym) + act_bytes) / BW * 1e6
    if cfg is None:
        out["route"] = _graph_us(route, n)
        out["both"] = _graph_us(both, n)
        out["floor_both"] = out["floor_experts"] + t * m["e"] * 2 / BW * 1e6
    return out


def prefill(m: dict, t: int, gu, dn, cfg: MoeConfig | None = None) -> dict:
    x = torch.randn(t, m["h"], device="cuda").bfloat16()
    logits, w, ids = _routing(t, m)
    ms = triton.testing.do_bench(lambda: tm.moe_experts(x, gu, dn, w, ids, config=cfg), return_mode="median")
    flops = 2 * t * m["k"] * 3 * m["h"] * m["i"]
    out = {"experts": ms * 1e3, "floor": flops / PEAK * 1e6, "tflops": flops / (ms * 1e-3) / 1e12}
    if cfg is None:
        out["route"] = (
            triton.testing.do_bench(lambda: tm.moe_route(logits, m["k"]), return_mode="median") * 1e3
        )
        a = torch.randn(t * m["k"], m["h"], device="cuda").bfloat16()
        b = torch.randn(t * m["k"], m["i"], device="cuda").bfloat16()
        # the same FLOPs as one dense GEMM pair, [T*k, H] @ [H, 2I] and [T*k, I] @ [I, H]
        w1 = torch.randn(2 * m["i"], m["h"], device="cuda").bfloat16().t()
        w2 = torch.randn(m["h"], m["i"], device="cuda").bfloat16().t()

        def dense():
            torch.mm(a, w1)
            torch.mm(b, w2)

        out["cublas"] = triton.testing.do_bench(dense, return_mode="median") * 1e3
    return out


def _n_layers(m: dict, fmt: str) -> int:
    per_layer = m["e"] * _expert_bytes(m, fmt)
    return max(2, min(16, int(MAX_LAYER_BYTES // per_layer)))


def _candidates(t: int, fmt: str) -> list[Tile]:
    """Tiles tried by --sweep; gate_up and down vary one at a time around the default."""
    gemv = [Tile(GEMV, bn, bk, 4, s) for bn in (8, 16, 32) for bk in (128, 256, 512) for s in (3, 4)]
    swap = [
        Tile(16, bn, bk, 4, s, swap=True) for bn in (32, 64, 128) for bk in (64, 128, 256) for s in (3, 4)
    ]
    plain = [
        Tile(bm, bn, bk, w, s)
        for bm in (64, 128)
        for bn in (64, 128)
        for bk in (64, 128)
        for w in (4, 8)
        for s in (3, 4)
        if not (bm == 128 and bn == 128 and bk == 128)
    ]
    if fmt in (INT4, FP8):  # K-steps inside one 128-group / scale block; no GEMV path
        swap = [tl_ for tl_ in swap if tl_.block_k <= 128]
        plain = [replace(tl_, num_warps=8) for tl_ in plain if tl_.block_k <= 128]
        gemv = swap
    if t == 1:
        tiles = gemv + swap
    elif t <= 64:
        tiles = swap + [
            Tile(32, bn, bk, 4, s, swap=True) for bn in (64, 128) for bk in (64, 128) for s in (3, 4)
        ]
    else:
        tiles = plain
    return list(dict.fromkeys(tiles))


def sweep(m: dict, t: int, layers: Layers, fmt: str) -> None:
    base = pick_config(t, m["k"], m["e"], m["h"], m["i"], fmt)
    is_decode = t <= 64
    routes = [_routing(t, m) for _ in range(len(layers.gu))] if is_decode else None

    def measure(cfg: MoeConfig) -> float:
        try:
            if is_decode:
                return decode(m, t, layers, cfg, routes)["experts"]
            return prefill(m, t, layers.gu[0], layers.dn[0], cfg)["experts"]
        except Exception as ex:  # a tile that does not fit (shared memory / registers) is skipped
            print(f"    {cfg}: failed ({type(ex).__name__}: {str(ex)[:60]})")
            return math.inf

    best = base
    best_us = measure(base)
    print(f"  T={t}: default {best_us:.2f} us  {base}")
    alternatives = []
    if t == 1:  # the other T == 1 paths
        sw = Tile(16, 64, 128, 4, 4, swap=True)
        alternatives = [
            MoeConfig(sw, replace(sw, block_n=bn), direct=True, sum_in_down=True) for bn in (16, 32, 64)
        ]
        alternatives += [MoeConfig(sw, sw, direct=True), MoeConfig(sw, sw)]
    for cfg in alternatives:
        us = measure(cfg)
        print(f"    path {us:.2f} us  {cfg}")
        if us < best_us:
            best, best_us = cfg, us
    for part in ("gate_up", "down"):
        for tile in _candidates(t, fmt):
            if (tile.block_m == GEMV) != best.gemv:
                continue  # the GEMV path pairs GEMV tiles only
            other = best.down if part == "gate_up" else best.gate_up
            if tile.block_m != GEMV and tile.block_m != other.block_m:
                other = replace(other, block_m=tile.block_m, swap=tile.swap)
            if part == "gate_up":
                cfg = replace(best, gate_up=tile, down=other)
            else:
                cfg = replace(best, gate_up=other, down=tile)
            us = measure(cfg)
            if us < best_us:
                best, best_us = cfg, us
                print(f"    better {us:.2f} us  {cfg}")
    print(f"  BEST {fmt} T={t}: {best_us:.2f} us (default {measure(base):.2f})  {best}")
    key = (MOE[fmt].name, m["i"], m["h"], m_bucket(t, MOE[fmt].max_m))
    print(f"  TUNED entry (hinfer/ops/triton/tiles/tuned.py): {source_line(*key, best).strip()}")
    SWEPT.append(entry(*key, best) | {"us": best_us})


def profile(m: dict, t: int, layers: Layers) -> None:
    x = torch.randn(t, m["h"], device="cuda").bfloat16()
    logits, w, ids = _routing(t, m)

    def run():
        w2, ids2 = tm.moe_route(logits, m["k"])
        tm.moe_experts(x, layers.gu[0], layers.dn[0], w2, ids2)

    run()
    torch.cuda.synchronize()
    runs = 20
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            run()
        torch.cuda.synchronize()
    events = [ev for ev in prof.key_averages() if ev.device_type == torch.autograd.DeviceType.CUDA]
    print(f"\n  per kernel, T={t} (us per call, L2 warm; calls per layer; "
          f"{sum(ev.count for ev in events) / runs:.0f} launches per layer):")
    for ev in events:
        print(f"    {ev.key[:56]:56s} {ev.device_time_total / ev.count:9.2f} {ev.count / runs:5.1f}")


def copy_bandwidth() -> float:
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), return_mode="median")
    return 2 * a.numel() * 4 / (ms * 1e-3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), nargs="*", default=["35b", "122b"])
    ap.add_argument("--t", type=int, nargs="*", default=list(DECODE_T + PREFILL_T))
    ap.add_argument("--fmt", choices=[BF16, INT4, FP8], nargs="*", default=[BF16, INT4, FP8])
    ap.add_argument(
        "--int4-sym", action="store_true", help="int4 without zero points (the inline-PTX unpack)"
    )
    ap.add_argument("--pdl", action="store_true", help="decode rows again without PDL (HINFER_PDL=0)")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--tuned-out", type=Path, help="with --sweep: the winners as JSON (HINFER_TILES)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    print(f"copy bandwidth now: {copy_bandwidth() / 1e12:.2f} TB/s (floors use {BW / 1e12:.1f} TB/s)")
    table = []
    for name in args.model:
        for fmt in args.fmt:
            table += run_model(name, fmt, args)
            if args.tuned_out and SWEPT:  # as it goes: a sweep cut short keeps its winners
                write(args.tuned_out, SWEPT)
    print(f"\n{'what':48s} {'us':>10s} {'floor us':>10s} {'ratio':>7s}")
    for what, us, floor in table:
        print(f"{what:48s} {us:10.2f} {floor:10.2f} {floor / us:7.2f}")


def run_model(name: str, fmt: str, args) -> list[tuple]:
    m = MODELS[name]
    n = _n_layers(m, fmt)
    layers = Layers(m, n, fmt, args.int4_sym)
    tag = f"{name} {fmt}" + (" sym" if fmt == INT4 and args.int4_sym else "")
    print(f"\n== {tag}: E={m['e']} k={m['k']} H={m['h']} I={m['i']}; {n} layers of weights cycled")
    table = []
    for t in args.t:
        if t <= 64:
            r = decode(m, t, layers)
            print(
                f"  decode T={t:3d}: {r['distinct']:6.1f} experts  route {r['route']:7.2f}  experts "
                f"{r['experts']:8.2f} (floor {r['floor_experts']:7.2f})  route+experts {r['both']:8.2f} "
                f"(floor {r['floor_both']:7.2f}) us"
            )
            table.append((f"{tag} decode T={t} experts", r["experts"], r["floor_experts"]))
            table.append((f"{tag} decode T={t} route+experts", r["both"], r["floor_both"]))
            if args.pdl:  # the same without programmatic dependent launch (HINFER_PDL=0; on by default)
                os.environ["HINFER_PDL"] = "0"
                try:
                    r = decode(m, t, layers)
                finally:
                    os.environ.pop("HINFER_PDL")
                print(f"    without PDL: experts {r['experts']:8.2f}  route+experts {r['both']:8.2f} us")
                table.append((f"{tag} decode T={t} experts no PDL", r["experts"], r["floor_experts"]))
                table.append((f"{tag} decode T={t} route+experts no PDL", r["both"], r["floor_both"]))
        else:
            r = prefill(m, t, layers.gu[0], layers.dn[0])
            print(
                f"  prefill T={t:5d}: route {r['route']:7.1f}  experts {r['experts']:9.1f} us "
                f"({r['tflops']:.0f} TFLOP/s; floor {r['floor']:.1f} us; cuBLAS same FLOPs {r['cublas']:.1f} us)"
            )
            table.append((f"{tag} prefill T={t} experts", r["experts"], r["floor"]))
            table.append((f"{tag} prefill T={t} cuBLAS same FLOPs", r["cublas"], r["floor"]))
        if args.profile:
            profile(m, t, layers)
    if args.sweep:
        print(f"\n== sweep {tag} (experts us per layer)")
        for t in args.t:
            sweep(m, t, layers, fmt)
    del layers
    torch.cuda.empty_cache()
    return table


if __name__ == "__main__":
    main()
