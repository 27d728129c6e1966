"""Linear kernels at the Qwen3.6-27B shapes: decode bandwidth vs the measured copy bandwidth, prefill TFLOP/s.

    python bench/linear_kernels.py                     # decode M = 1, 8, 16 + prefill M = 8192, all formats
    python bench/linear_kernels.py --tune [--tuned-out t.json]  # sweep skinny-kernel tiles: TUNED entries
    python bench/linear_kernels.py --tune --formats bf16 --ms 1,8 --shapes gdn_ab,gdn_ab_35b,router_35b,gdn_ab_122b,router_122b
    python bench/linear_kernels.py --errors            # quantization error tables (CPU is fine)
    HINFER_INT4_ASM=0 python bench/linear_kernels.py --formats int4   # portable int4 unpack, for comparison

Decode timing: each op is captured in a CUDA graph once per weight copy, over enough copies (>= 512 MB in all)
that L2 never holds the next weight; time per op = graph replay time / copies (median of replays). That is the
engine's situation (a decode step is a graph replay), including the ~1 us gap between graph kernels. GB/s counts
the weight bytes (packed values + scales + zeros) read once; "ratio" divides by the copy bandwidth (bytes read +
written by a 4 GiB device copy over its median time), as DESIGN.md's figures do.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H = 5120
SHAPES = [("qkv", 14336, H), ("gdn_in", 16384, H), ("gate_up", 34816, H), ("o_proj", H, 6144),
          ("down", H, 17408), ("lm_head", 248320, H)]  # fmt: skip
# the small bf16 GEMVs of a decode step (latency, not bytes): GDN b / a rows, the MoE routers with a folded
# shared expert's gate row (35B-A3B, 122B-A10B); by name through --shapes
SMALL_SHAPES = [("gdn_ab", 96, H), ("gdn_ab_35b", 64, 2048), ("router_35b", 257, 2048), ("gdn_ab_122b", 128, 3072),
                ("router_122b", 257, 3072)]  # fmt: skip
# a 35B-A3B MoE layer's routed experts as one dense GEMV of one x row (by name through --shapes): the gate_up rows
# of the experts a step selects stacked (9 at one token with the shared one, ~57 distinct at eight: 1 - (1 - 8 /
# 256)^8 of 256), their downs side by side along K (sum_e W_e act_e = [W_1 .. W_E] [act_1; ..; act_E]): the same
# bytes, each weight row meeting one row of x, as in the experts' launches at those sizes; what another kernel's
# loop would do there, without the routing
PROXY_SHAPES = [("experts_gu_t1", 9 * 1024, 2048), ("experts_down_t1", 2048, 9 * 512),
                ("experts_gu_t8", 57 * 1024, 2048), ("experts_down_t8", 2048, 57 * 512)]  # fmt: skip
DECODE_FORMATS = ("bf16-cublas", "bf16", "int4", "int4-sym", "int4-torch", "int4-mma", "int4-mma-sym", "int4-rows-mma", "int4-a8",
                  "int4-a8-sym", "int4-a8-ahead", "fp8", "fp8-block", "fp8-mma",
                  "fp8-block-mma", "fp8-cublas")  # fmt: skip
# int4-mma*: the Gluon tensor-core kernel on fragment-ordered weights (hinfer/ops/triton/linear_int4_mma.py, the
# CUDA decode path of int4); the re-layout is built once per weight and cloned for the other copies; int4-a8*: the
# same weights with x rounded to int8 in the kernel (linear_int4_a8.py, HINFER_INT4_DECODE=a8; up to 8 rows);
# int4-a8-ahead: x rounded in its own launch first (act_int8.py, the tile's x_ahead), both timed; fp8*-mma: the fp8
# tensor-core kernel on the same row-major weights (linear_fp8_mma.py; fp8 / fp8-block: Fp8Weight.matmul's path);
# fp8-cublas: cuBLAS's fp8 GEMM on them, x quantized per token (W8A8), the library figure beside ours
ROTATE_BYTES = 512 << 20


@dataclass
class Row:
    kind: str  # decode | prefill
    shape: str
    n: int
    k: int
    m: int
    fmt: str
    us: float
    gbs: float = 0.0  # weight GB/s (decode)
    ratio: float = 0.0  # gbs / copy bandwidth
    tflops: float = 0.0  # prefill


def config_shapes(name: str) -> list[tuple[str, int, int]]:
    """The int4 dense projections (N, K) of a packaged config: attention qkv + gate, GDN in_proj (q, k, v, z; the
    b / a rows stay bf16), o_proj, GDN out_proj, the MLP or the MoE shared expert, and the lm_head (--lm-head)."""
    from hinfer.config import load_model_config
    from hinfer.fixtures import config_dir

    c = load_model_config(config_dir(name))
    h, hd = c.hidden_size, c.head_dim
    kd, vd = c.linear_num_key_heads * c.linear_key_head_dim, c.linear_num_value_heads * c.linear_value_head_dim
    inter = c.shared_expert_intermediate_size if c.num_experts else c.intermediate_size
    return [("qkv", c.num_attention_heads * hd * 2 + 2 * c.num_key_value_heads * hd, h), ("gdn_in", 2 * kd + 2 * vd, h),
            ("o_proj", h, c.num_attention_heads * hd), ("gdn_out", h, vd), ("gate_up", 2 * inter, h),
            ("down", h, inter), ("lm_head", c.vocab_size, h)]  # fmt: skip


def events_median(fn: Callable[[], None], reps: int = 20, warmup: int = 3) -> float:
    """Median seconds of fn() between CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def copy_bandwidth(gib: int = 4) -> float:
    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    t = events_median(functools.partial(torch.Tensor.copy_, torch.empty_like(src), src), reps=10)
    torch.cuda.empty_cache()
    return 2 * (gib << 30) / t


def graph_time(op: Callable[[object], torch.Tensor], weights: list) -> float:
    """Seconds per op call inside one CUDA graph that runs op over every weight copy."""
    for w in weights[:2]:
        op(w)  # compile, allocate split-K counters, run the int4 asm check: all outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in weights:
            op(w)
    t = events_median(graph.replay, reps=10)
    del graph
    return t / len(weights)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def make_weight(fmt: str, n: int, k: int, g: torch.Generator):
    """(weight object, bytes read per matmul)."""
    from hinfer.quant import quantize_fp8, quantize_int4

    w = (torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    if fmt.startswith("bf16"):
        return w, w.numel() * 2
    if fmt == "int4-torch":
        return _torch_int4(w)
    if fmt == "int4-rows-mma":  # asymmetric, hinfer.quant.int4's layout read by the tensor-core kernel
        q = quantize_int4(w)
        del w
        return q, q.nbytes()
    if fmt.startswith(("int4-mma", "int4-a8")):
        from hinfer.quant.int4_mma_weight import Int4MmaWeight

        q = Int4MmaWeight.from_int4(quantize_int4(w, zero_point=fmt in ("int4-mma", "int4-a8", "int4-a8-ahead")))
        del w
        return q, q.nbytes()
    if fmt.startswith("int4"):
        q = quantize_int4(w, zero_point=fmt == "int4")
    else:
        q = quantize_fp8(w, "block" if fmt.startswith("fp8-block") else "channel")
    del w
    return q, q.nbytes()


def _torch_int4(w: torch.Tensor):
    """torch's own int4 weight-only kernel (tinygemm, the gpt-fast path), the library figure to beat:
    (packed weight, scales_and_zeros) and the bytes one matmul reads."""
    from hinfer.quant import quantize_int4
    from hinfer.quant.int4 import unpack_int4

    n, k = w.shape
    q = quantize_int4(w, zero_point=True)
    u = unpack_int4(q.qweight, k).to(torch.int32)
    packed = torch._convert_weight_to_int4pack((u[:, ::2] << 4 | u[:, 1::2]).to(torch.uint8), 8)
    s = q.scales.float()
    # tinygemm: w = (u - 8) * scale + zero_term, with zero_term = (8 - z) * scale
    sz = torch.stack([s, (8 - q.zeros.float()) * s], dim=-1).transpose(0, 1).contiguous().bfloat16()
    return (packed, sz), packed.numel() * packed.element_size() + sz.numel() * 2


def _copies(w, nbytes: int, rotate: int = ROTATE_BYTES) -> list:
    """w and clones of it, `rotate` bytes in all, so each call reads its weight from DRAM, not L2."""
    n = max(2, math.ceil(rotate / nbytes))
    return [w] + [_clone(w) for _ in range(n - 1)]


def _clone(w):
    import copy

    if hasattr(w, "words"):  # Int4MmaWeight: clone its tensors (the re-layout is not rebuilt)
        return w.clone()
    if isinstance(w, tuple):
        return tuple(t.clone() for t in w)
    return w.clone() if isinstance(w, torch.Tensor) else copy.deepcopy(w)


def decode_op(fmt: str, x: torch.Tensor) -> Callable[[object], torch.Tensor]:
    from hinfer.ops.linear import linear

    if fmt == "bf16-cublas":
        return lambda w: torch.nn.functional.linear(x, w)
    if fmt == "int4-torch":
        return lambda w: torch._weight_int4pack_mm(x, w[0], 128, w[1])
    if fmt.startswith("int4-mma") or fmt == "int4-rows-mma":
        from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

        return lambda w: int4_mma_matmul(x, w)
    if fmt == "fp8-cublas":  # the library figure: x to e4m3 per token, cuBLAS fp8 rowwise (torch._scaled_mm)
        from hinfer.quant.fp8 import scaled_mm_rowwise

        return lambda w: scaled_mm_rowwise(x, w.weight, w.scale)
    if fmt.startswith("fp8") and fmt.endswith("-mma"):  # the fp8 tensor-core kernel at its heuristic / tuned tile
        from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul

        return lambda w: fp8_mma_matmul(x, w.weight, w.scale, w.block is not None)
    if fmt.startswith("int4-a8"):
        from dataclasses import replace

        from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
        from hinfer.ops.triton.tiles.linear import a8_config

        if fmt.startswith("int4-a8-ahead"):  # x quantized in its own launch, timed with the matmul
            return lambda w: int4_a8_matmul(x, w, cfg=replace(a8_config(x.shape[0], *w.shape), x_ahead=True))
        return lambda w: int4_a8_matmul(x, w)
    return lambda w: linear(x, w)


def bench_decode(shapes, formats, ms, bw: float) -> list[Row]:
    rows = []
    g = _gen()
    for name, n, k in shapes:
        for fmt in formats:
            if name == "lm_head" and not fmt.startswith("bf16"):
                continue  # lm_head stays bf16 in every recipe
            try:
                w, nbytes = make_weight(fmt, n, k, g)
            except Exception as e:  # noqa: BLE001 - a library kernel missing on this build: say so, go on
                print(f"  {name:8s} {fmt:12s} unavailable: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            weights = _copies(w, nbytes)
            for m in ms:
                x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
                try:
                    t = graph_time(decode_op(fmt, x), weights)
                except Exception as e:  # noqa: BLE001
                    print(f"  {name:8s} {fmt:12s} M={m} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                gbs = nbytes / t / 1e9
                rows.append(Row("decode", name, n, k, m, fmt, t * 1e6, gbs, gbs * 1e9 / bw))
                print(f"  {name:8s} {fmt:12s} M={m:<3d} {t * 1e6:8.1f} us {gbs:7.0f} GB/s {gbs * 1e9 / bw:6.1%}",
                      flush=True)
            del w, weights
            torch.cuda.empty_cache()
    return rows


def bench_prefill(shapes, m: int) -> list[Row]:
    from hinfer.quant import fp8 as qfp8
    from hinfer.quant import int4 as qint4
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    rows = []
    g = _gen(1)
    print(f"cuBLAS fp8 with 1x128 scales on both operands: "
          f"{qfp8.scaled_mm_group_scales_ok(torch.cuda.current_device())}", flush=True)  # fmt: skip
    for name, n, k in shapes:
        if name == "lm_head":
            continue  # prefill computes logits for a handful of rows only
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        flop = 2 * m * n * k
        cases: list[tuple[str, Callable[[], object]]] = []
        scratch_of = None
        wb, _ = make_weight("bf16", n, k, g)
        cases.append(("bf16-cublas", functools.partial(torch.nn.functional.linear, x, wb)))
        for fmt in ("int4", "int4-sym"):
            q, _ = make_weight(fmt, n, k, g)
            for mode in qint4.PREFILL_MODES:
                cases.append((f"{fmt}:{mode}", functools.partial(qint4._triton_matmul, q, x, None, mode)))
            mw = Int4MmaWeight.from_int4(q)  # the decode layout, the engine's: its own scratch writers
            scratch_of = mw if fmt == "int4" else scratch_of
            for mode in ("dequant", "fp8", "w4a8"):  # w4a8: cuBLAS with 1x128 scales where probed to work
                cases.append((f"{fmt}-mma:{mode}", functools.partial(mw.prefill, x, None, mode)))
        qc, _ = make_weight("fp8", n, k, g)
        cases.append(("fp8:scaled_mm", functools.partial(qfp8._triton_matmul, qc, x, None)))
        qb, _ = make_weight("fp8-block", n, k, g)
        modes = ["triton"] + (["scaled_mm"] if qfp8._scaled_mm_block_ok(torch.cuda.current_device()) else [])
        for mode in modes:
            cases.append((f"fp8-block:{mode}", functools.partial(qfp8._triton_matmul, qb, x, None, mode)))
        for fmt, fn in cases:
            t = events_median(fn, reps=10)
            rows.append(Row("prefill", name, n, k, m, fmt, t * 1e6, tflops=flop / t / 1e12))
            print(f"  {name:8s} {fmt:22s} M={m} {t * 1e3:8.2f} ms {flop / t / 1e12:7.0f} TFLOP/s", flush=True)
        rows += _scratch_writers(name, scratch_of, m)
        del cases
        torch.cuda.empty_cache()
    return rows


def _scratch_writers(name: str, mw, m: int) -> list[Row]:
    """The int4 prefill scratch alone (fragment order -> bf16 / e4m3 [N, K]), each kernel that can write it: us
    and GB/s moved (words read, scratch written), the prefill GEMMs' overhead over their fp8 / bf16 twins."""
    from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

    rows = []
    forms = {"bf16": {}, "fp8-rows": {"row_scale": mw.fp8_row_scale()}, "fp8-unscaled": {"unscaled": True}}
    for form, kw in forms.items():
        moved = mw.words.numel() * 4 + mw.n * mw.k * (2 if form == "bf16" else 1)
        for coalesced in (False, True):
            fn = functools.partial(int4_mma_dequantize, mw.words, mw.scales, mw.zeros, mw.n, mw.k,
                                   coalesced=coalesced, **kw)  # fmt: skip
            t = events_median(fn, reps=10)
            label = f"scratch:{form}:{'coalesced' if coalesced else 'gather'}"
            rows.append(Row("prefill-scratch", name, mw.n, mw.k, m, label, t * 1e6, gbs=moved / t / 1e9))
            print(f"  {name:8s} {label:30s} {t * 1e6:8.1f} us {moved / t / 1e9:7.0f} GB/s", flush=True)
    return rows


def _run_skinny(kind: str, n: int, x: torch.Tensor, cfg, wt) -> torch.Tensor:
    from hinfer.ops.triton.linear import skinny_matmul
    from hinfer.ops.triton.tiles.forms import BF16, INT4

    if kind == BF16:
        return skinny_matmul(x, kind, wt, n, cfg=cfg)
    if kind == INT4:
        return skinny_matmul(x, kind, wt.qweight, n, wt.scales, wt.zeros, cfg=cfg)
    return skinny_matmul(x, kind, wt.weight, n, wt.scale, cfg=cfg)


def tune(shapes, formats, ms, tuned_out: Path | None = None) -> None:
    """Sweep skinny_candidates per (format, shape, M); print the winners as TUNED entries (tiles/tuned.py) and
    write them to `tuned_out` in the form HINFER_TILES reads."""
    from hinfer.ops.triton.common import num_sms
    from hinfer.ops.triton.tiles import forms, table
    from hinfer.ops.triton.tiles.candidates import skinny_candidates
    from hinfer.ops.triton.tiles.linear import heuristic_config

    kinds = {"bf16": forms.BF16, "fp8": forms.FP8_ROW, "fp8-block": forms.FP8_BLOCK, "int4": forms.INT4}
    g = _gen(2)
    lines, entries = [], []
    for name, n, k in shapes:
        for fmt in formats:
            if fmt not in kinds or (name == "lm_head" and fmt != "bf16"):
                continue
            kind = kinds[fmt]
            w, nbytes = make_weight(fmt, n, k, g)
            weights = _copies(w, nbytes)
            for m in ms:
                x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
                base = heuristic_config(kind, m, n, k, num_sms())
                best, by_form, base_t = None, {}, None
                for cfg in [base, *skinny_candidates(kind, m, n, k)]:
                    try:
                        t = graph_time(functools.partial(_run_skinny, kind, n, x, cfg), weights)
                    except Exception as e:  # noqa: BLE001 - out of shared memory / registers: skip
                        print(f"    skip {cfg}: {type(e).__name__}", flush=True)
                        continue
                    if cfg is base and base_t is None:
                        base_t = t
                    if best is None or t < best[0]:
                        best = (t, cfg)
                    if cfg.words not in by_form or t < by_form[cfg.words][0]:
                        by_form[cfg.words] = (t, cfg)
                assert best is not None
                if base_t is not None:
                    print(f"  {name:8s} {fmt:10s} M={m:<3d} heuristic {base_t * 1e6:7.1f} us "
                          f"{nbytes / base_t / 1e9:6.0f} GB/s {base}", flush=True)  # fmt: skip
                if len(by_form) > 1:  # the fp8 GEMV's two forms side by side
                    for words, (t, cfg) in sorted(by_form.items()):
                        print(f"  {name:8s} {fmt:10s} M={m:<3d} {'words' if words else 'codes'} {t * 1e6:7.1f} us "
                              f"{nbytes / t / 1e9:6.0f} GB/s {cfg}", flush=True)  # fmt: skip
                t, cfg = best
                gbs = nbytes / t / 1e9
                print(f"  {name:8s} {fmt:10s} M={m:<3d} best {t * 1e6:7.1f} us {gbs:6.0f} GB/s {cfg}", flush=True)
                lines.append(table.source_line(kind, n, k, table.m_bucket(m), cfg))
                entries.append(table.entry(kind, n, k, table.m_bucket(m), cfg) | {"us": t * 1e6})
                if tuned_out:  # written as it goes: a sweep cut short keeps its winners
                    table.write(tuned_out, entries)
            del w, weights
            torch.cuda.empty_cache()
    print("\nTUNED entries (paste into hinfer/ops/triton/tiles/tuned.py):\n" + "\n".join(lines))
    if tuned_out:
        table.write(tuned_out, entries)  # HINFER_TILES=this file uses them


def errors() -> None:
    """Quantization round-trip error of each format on several weight distributions, and the resulting linear
    layer error against bf16 on random activations (relative Frobenius norms)."""
    from hinfer.quant import quantize_fp8, quantize_int4

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    n, k = 1024, 4096
    dists = {
        "gaussian": lambda: torch.randn(n, k),
        "laplace": lambda: torch.distributions.Laplace(0.0, 1.0).sample((n, k)),
        "student-t(3)": lambda: torch.distributions.StudentT(3.0).sample((n, k)),
        "gaussian + 1% x8 columns": lambda: torch.randn(n, k) * torch.where(torch.rand(k) < 0.01, 8.0, 1.0),
    }
    fmts = {
        "int4 asym": lambda w: quantize_int4(w, zero_point=True),
        "int4 sym": lambda w: quantize_int4(w, zero_point=False),
        "fp8 channel": lambda w: quantize_fp8(w, "channel"),
        "fp8 block": lambda w: quantize_fp8(w, "block"),
    }
    x = torch.randn(64, k, device=dev).bfloat16()
    print(f"relative error, weight round trip / linear output vs bf16 (W {n}x{k} bf16, x 64x{k} N(0,1))")
    print(f"| weights | {' | '.join(fmts)} |\n|---|{'---|' * len(fmts)}")
    for dname, make in dists.items():
        w = make().to(dev).bfloat16()
        y = (x.float() @ w.float().t())
        cells = []
        for q in (f(w) for f in fmts.values()):
            d = q.dequantize(torch.float32)
            ew = ((d - w.float()).norm() / w.float().norm()).item()
            ey = ((q.matmul(x).float() - y).norm() / y.norm()).item()
            cells.append(f"{ew:.4f} / {ey:.4f}")
        print(f"| {dname} | {' | '.join(cells)} |")


def table(rows: list[Row], bw: float) -> None:
    print(f"\ncopy bandwidth {bw / 1e12:.2f} TB/s (read + write)")
    dec = [r for r in rows if r.kind == "decode"]
    if dec:
        ms = sorted({r.m for r in dec})
        fmts = list(dict.fromkeys(r.fmt for r in dec))
        print("decode: us per matmul (ratio of weight GB/s to copy bandwidth)")
        print(f"{'shape':9s}{'M':>4s} " + "".join(f"{f:>20s}" for f in fmts))
        for name in dict.fromkeys(r.shape for r in dec):
            for m in ms:
                cells = []
                for f in fmts:
                    r = next((r for r in dec if r.shape == name and r.m == m and r.fmt == f), None)
                    cells.append(f"{r.us:8.1f} ({r.ratio:5.1%})" if r else "")
                print(f"{name:9s}{m:>4d} " + "".join(f"{c:>20s}" for c in cells))
    pre = [r for r in rows if r.kind == "prefill"]
    if pre:
        fmts = list(dict.fromkeys(r.fmt for r in pre))
        print(f"prefill M={pre[0].m}: TFLOP/s")
        print(f"{'shape':9s}" + "".join(f"{f:>21s}" for f in fmts))
        for name in dict.fromkeys(r.shape for r in pre):
            cells = [next((f"{r.tflops:.0f}" for r in pre if r.shape == name and r.fmt == f), "") for f in fmts]
            print(f"{name:9s}" + "".join(f"{c:>21s}" for c in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default=",".join(DECODE_FORMATS))
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    ap.add_argument("--ms", default="1,8,16", help="decode row counts")
    ap.add_argument("--prefill-m", type=int, default=8192, help="0 skips the prefill GEMMs")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--errors", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--tuned-out", type=Path, help="with --tune: write the winners as JSON (HINFER_TILES)")
    a = ap.parse_args()
    if a.errors:
        errors()
        return
    assert torch.cuda.is_available(), "the benchmark needs a CUDA GPU"
    shapes = [s for s in SHAPES + SMALL_SHAPES + PROXY_SHAPES if s[0] in a.shapes.split(",")]
    formats = [f for f in a.formats.split(",") if f]
    ms = [int(m) for m in a.ms.split(",")]
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; HINFER_INT4_ASM="
          f"{os.environ.get('HINFER_INT4_ASM', '1')}")
    if a.tune:
        tune(shapes, formats, ms, a.tuned_out)
        return
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    rows = bench_decode(shapes, formats, ms, bw)
    if a.prefill_m:
        rows += bench_prefill(shapes, a.prefill_m)
    table(rows, bw)
    if a.json:
        a.json.write_text(json.dumps({"copy_bw": bw, "rows": [asdict(r) for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
