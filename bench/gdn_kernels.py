"""Micro-benchmark of the Gated DeltaNet Triton kernels at one 27B layer's shapes (HK=16, HV=48, K=V=128,
conv channels 10240, bf16 activations, fp32 state) on one GPU.

    python bench/gdn_kernels.py            # decode C=1,8,64, verify C=8 x 4 tokens, prefill 8K
    python bench/gdn_kernels.py --sweep    # also sweep the tile settings of hinfer/ops/triton/gdn.py
    python bench/gdn_kernels.py --sweep-decode    # only the decode tiles (recurrent kernel, fused step)
    python bench/gdn_kernels.py --sweep-fused 32:2:0,32:2:168 --cs 1,8    # the fused step under register caps
    python bench/gdn_kernels.py --verify-writes --cs 1,8    # a verify step's state writes: per token or once

Decode rows are medians of CUDA-graph replays that cycle through enough layers' buffers (>= 256 MB) that the
state comes from HBM, not L2, as in the real model; each figure is per layer. Prefill rows use do_bench
(median). Floor = bytes that must move / 4.2e12 B/s (the copy bandwidth measured in the design brief); the
copy bandwidth this run measures is printed too. Target: GDN decode <= 5 us per layer at C=1.
"""

from __future__ import annotations

import argparse
import math
import random

import torch
import triton
import triton.testing

from hinfer.batch import ForwardBatch, SeqChunk, build_forward_batch
from hinfer.ops.triton import gdn as tg

HK, HV, KD, VD, CONV = 16, 48, 128, 128, 10240
PROJ = CONV + HV * VD + 2 * HV  # in_proj row: qkv | z | b | a
BW = 4.2e12
STATE_BYTES = HV * KD * VD * 4


def _batch(lens: list[int], verify: bool = False, one_write: bool = False) -> tuple[ForwardBatch, int]:
    """A batch on shuffled slots (verify rows also get one fresh slot per token, or with `one_write` one fresh slot
    for all of a sequence's tokens: the kernels then write its state once, after its last token); returns it and
    the slot count."""
    n_slots = 1 + sum(n + 1 if verify else 1 for n in lens)
    pool = list(range(1, n_slots))
    random.shuffle(pool)
    chunks = []
    for n in lens:
        st = ([pool.pop()] * n if one_write else [pool.pop() for _ in range(n)]) if verify else None
        chunks.append(SeqChunk(list(range(n)), 0, [0], pool.pop(), gdn_step_slots=st))
    return build_forward_batch(chunks, 1 << 20, "cuda"), n_slots


class Layer:
    """One layer's inputs and state for a batch (views laid out as the model has them)."""

    def __init__(self, t: int, n_slots: int) -> None:
        proj = torch.randn(t, PROJ, device="cuda").bfloat16()
        self.x = proj[:, :CONV]
        self.z = proj[:, CONV : CONV + HV * VD].view(t, HV, VD)
        self.a, self.b = proj[:, -2 * HV : -HV], proj[:, -HV:]
        self.norm_w = torch.ones(VD, device="cuda").bfloat16()
        qkv = torch.nn.functional.silu(torch.randn(t, CONV, device="cuda")).bfloat16()
        self.q = qkv[:, : HK * KD].view(t, HK, KD)
        self.k = qkv[:, HK * KD : 2 * HK * KD].view(t, HK, KD)
        self.v = qkv[:, 2 * HK * KD :].view(t, HV, VD)
        self.g = -torch.rand(t, HV, device="cuda") * 0.5
        self.beta = torch.rand(t, HV, device="cuda")
        self.w = torch.randn(CONV, 4, device="cuda").bfloat16()
        self.a_log = torch.rand(HV, device="cuda").bfloat16()
        self.dt_bias = torch.randn(HV, device="cuda").bfloat16()
        self.conv_state = torch.randn(n_slots, CONV, 3, device="cuda").bfloat16()
        self.ssm_state = torch.randn(n_slots, HV, KD, VD, device="cuda") * 0.1


def _ops(batch: ForwardBatch, fused: bool = False) -> dict:
    ops = {
        "gdn": lambda L: tg.gated_delta_rule(L.q, L.k, L.v, L.g, L.beta, L.ssm_state, batch),
        "conv": lambda L: tg.causal_conv1d(L.x, L.w, L.conv_state, batch),
        "gating": lambda L: tg.gdn_gating(L.a, L.b, L.a_log, L.dt_bias),
    }
    if fused:  # the model's op: the three above and the output norm in one kernel (gdn_decode.py) when every row
        # has one token (decode), the four kernels otherwise (FUSED_MAX_TOKENS); compare with their sum
        ops["fused"] = lambda L: tg.gated_delta_net(L.x, L.a, L.b, L.z, L.a_log, L.dt_bias, L.w, L.norm_w, 1e-6,
                                                    L.conv_state, L.ssm_state, batch, (HK, KD, HV, VD))  # fmt: skip
    return ops


def _bytes(op: str, c: int, n: int) -> float:
    """Bytes that must move for C sequences of n tokens each."""
    t = c * n
    if op == "gdn":  # state read once, written once (or once per token in verify), q k v read, o written
        writes = n if n > 1 and n <= tg.RECURRENT_MAX_TOKENS else 1
        return c * STATE_BYTES * (1 + writes) + t * (2 * HK * KD + 2 * HV * VD) * 2 + t * HV * 8
    if op == "conv":
        return t * CONV * 2 * 2 + c * CONV * 3 * 2 * 2 + CONV * 8
    if op == "fused":  # state and conv state read and written, x, z, a, b read, o written (and re-read, normed)
        writes = n if n > 1 else 1
        return (c * STATE_BYTES * (1 + writes) + c * CONV * 3 * 2 * (1 + writes)
                + t * (CONV + 4 * HV * VD + 2 * HV) * 2)  # fmt: skip
    return t * HV * (2 * 2 + 2 * 4)


def _graph_us(fn, layers: list[Layer]) -> float:
    def all_layers():
        for L in layers:
            fn(L)

    return triton.testing.do_bench_cudagraph(all_layers, rep=200, return_mode="median") * 1e3 / len(layers)


def decode_rows(cs=(1, 8, 64), verify=((8, 4),), only: tuple[str, ...] = ()) -> list[tuple]:
    """Rows (name, us per layer, floor us) of every op (or those in `only`) at C lanes of one token and at the
    verify shapes (C, n)."""
    rows = []
    for c, n in [(c, 1) for c in cs] + list(verify):
        batch, n_slots = _batch([n] * c, verify=n > 1)
        n_layers = max(2, min(48, math.ceil(256e6 / (c * STATE_BYTES))))  # the touched state > L2
        layers = [Layer(c * n, n_slots) for _ in range(n_layers)]
        for op, fn in _ops(batch, fused=True).items():
            if only and op not in only:
                continue
            us = _graph_us(fn, layers)
            floor = _bytes(op, c, n) / BW * 1e6
            rows.append(
                (f"{op} {'verify' if n > 1 else 'decode'} C={c}" + (f"x{n}" if n > 1 else ""), us, floor)
            )
        del layers
        torch.cuda.empty_cache()
    return rows


def verify_write_rows(c: int = 8, k: int = 4) -> list[tuple]:
    """What a verify step's state writes cost: the fused step at C sequences of K tokens writing the state after
    every token (as verification does: the accepted prefix's state is kept) against writing it once, and 2 K
    tokens written once (a step that first replays the previous round's accepted tokens from their logged inputs,
    then verifies: one state read and one write a round instead of 1 + K writes). One decode token for scale."""
    rows = []
    old_max = tg.FUSED_MAX_TOKENS
    tg.FUSED_MAX_TOKENS = 2 * k  # the fused step at 2 K tokens too (the model stops at 4)
    try:
        for n, one, what in ((1, False, "decode"), (k, False, f"verify x{k}, a write a token"),
                             (k, True, f"verify x{k}, one write"), (2 * k, True, f"replay + verify x{2 * k}, one write")):
            batch, n_slots = _batch([n] * c, verify=n > 1, one_write=one)
            n_layers = max(2, min(48, math.ceil(256e6 / (c * STATE_BYTES))))
            layers = [Layer(c * n, n_slots) for _ in range(n_layers)]
            us = _graph_us(_ops(batch, fused=True)["fused"], layers)
            floor = _bytes("fused", c, 1 if one else n) / BW * 1e6  # state + conv state: one write when `one`
            rows.append((f"fused C={c} {what}", us, floor))
            del layers
            torch.cuda.empty_cache()
    finally:
        tg.FUSED_MAX_TOKENS = old_max
    return rows


def prefill_rows(lens: list[int]) -> list[tuple]:
    batch, n_slots = _batch(lens)
    L = Layer(sum(lens), n_slots)
    rows = []
    for op, fn in _ops(batch).items():
        ms = triton.testing.do_bench(lambda fn=fn: fn(L), warmup=5, rep=200, return_mode="median")
        floor = _bytes(op, len(lens), max(lens)) / BW * 1e6
        name = f"{op} prefill {sum(lens)} ({len(lens)} seq)"
        rows.append((name, ms * 1e3, floor))
    return rows


def prefill_breakdown(lens: list[int]) -> None:
    """Per-kernel CUDA time of one prefill layer (the profiler's averages)."""
    batch, n_slots = _batch(lens)
    L = Layer(sum(lens), n_slots)
    for fn in _ops(batch).values():
        fn(L)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            for fn in _ops(batch).values():
                fn(L)
        torch.cuda.synchronize()
    print(f"\nper kernel, prefill {sum(lens)} tokens (us per call):")
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and "kernel" in e.key:
            print(f"  {e.key[:60]:60s} {e.device_time_total / e.count:9.1f}")


def fla_row(lens: list[int]) -> list[tuple]:
    """fla-core's chunk_gated_delta_rule on the same inputs (when installed), for comparison."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception:
        return []
    t = sum(lens)
    L = Layer(t, 2)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    rep = HV // HK
    q = L.q.repeat_interleave(rep, 1)[None].contiguous()
    k = L.k.repeat_interleave(rep, 1)[None].contiguous()
    h0 = torch.zeros(len(lens), HV, KD, VD, device="cuda")

    def run():
        return chunk_gated_delta_rule(
            q, k, L.v[None].contiguous(), L.g[None], L.beta[None], initial_state=h0, output_final_state=True,
            cu_seqlens=cu, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip

    ms = triton.testing.do_bench(run, warmup=5, rep=200, return_mode="median")
    return [(f"fla chunk_gated_delta_rule {t}", ms * 1e3, _bytes("gdn", len(lens), max(lens)) / BW * 1e6)]


def copy_bandwidth() -> float:
    a = torch.empty(1 << 28, device="cuda")  # 1 GiB
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), return_mode="median")
    return 2 * a.numel() * 4 / (ms * 1e-3)


def print_table(rows: list[tuple], title: str) -> None:
    print(f"\n{title}\n{'what':44s} {'us':>10s} {'floor us':>10s} {'ratio':>7s}")
    for name, us, floor in rows:
        print(f"{name:44s} {us:10.2f} {floor:10.2f} {floor / us:7.2f}")


def sweep(decode: bool = True) -> None:
    if decode:
        sweep_decode()
    sweep_prefill(decode)


def sweep_decode(bvs: tuple[int, ...] = (8, 16, 32, 64, 128)) -> None:
    base_d, base_f = tg.DECODE_TILES, tg.FUSED_TILES
    print("\nsweep: recurrent kernel (DECODE_TILES) | fused step (FUSED_TILES, verify rows too), us per layer at"
          " C=1, C=8, verify 1x4, verify 8x4")
    for bv in bvs:  # 128 = V: the fused step's norm without its ticket
        for nw in (1, 2, 4) if bv < 128 else (8, 16):
            tg.DECODE_TILES, tg.FUSED_TILES = ((1 << 30, bv, nw),), ((1 << 30, bv, nw),)
            max_tokens, tg.FUSED_MAX_TOKENS = tg.FUSED_MAX_TOKENS, 16
            try:
                rows = decode_rows(cs=(1, 8), verify=((1, 4), (8, 4)))
            except Exception as e:  # a tile that does not fit is just skipped
                print(f"  BV={bv:3d} warps={nw}: failed ({type(e).__name__}: {str(e)[:80]})")
                continue
            finally:
                tg.FUSED_MAX_TOKENS = max_tokens
            rec = " ".join(f"{r[1]:7.2f}" for r in rows if r[0].startswith("gdn"))
            fused = " ".join(f"{r[1]:7.2f}" for r in rows if r[0].startswith("fused"))
            print(f"  BV={bv:3d} warps={nw}: {rec} | {fused}")
    tg.DECODE_TILES, tg.FUSED_TILES = base_d, base_f


def sweep_fused(tiles: list[tuple[int, int, int]], cs=(1, 8), verify=((8, 4),), best_out: str = "") -> None:
    """The fused step alone at each tile (BV, warps, max registers: the launch's maxnreg, 0 = the compiler's
    choice), us per layer at each shape; `best_out`: the fastest tile at the most lanes written as a
    HINFER_GDN_FUSED_TILES row ("inf:BV:warps:registers"), for a run of the decode graph on it."""
    base, max_tokens = tg.FUSED_TILES, tg.FUSED_MAX_TOKENS
    shapes = [f"C={c}" for c in cs] + [f"C={c}x{n}" for c, n in verify]
    print(f"\nsweep: fused step (BV, warps, max registers), us per layer at {', '.join(shapes)}")
    best = None
    for bv, nw, regs in tiles:
        tg.FUSED_TILES, tg.FUSED_MAX_TOKENS = ((1 << 30, bv, nw, regs),), 16
        try:
            us = [r[1] for r in decode_rows(cs=cs, verify=verify, only=("fused",))]
        except Exception as e:  # a tile that does not fit is just skipped
            print(f"  BV={bv:3d} warps={nw} regs={regs:3d}: failed ({type(e).__name__}: {str(e)[:80]})")
            continue
        finally:
            tg.FUSED_TILES, tg.FUSED_MAX_TOKENS = base, max_tokens
        print(f"  BV={bv:3d} warps={nw} regs={regs:3d}: " + " ".join(f"{u:8.2f}" for u in us), flush=True)
        if best is None or us[len(cs) - 1] < best[0]:
            best = (us[len(cs) - 1], bv, nw, regs)
    if best and best_out:
        with open(best_out, "w") as f:
            f.write(f"inf:{best[1]}:{best[2]}:{best[3]}\n")
        print(f"fastest at C={cs[-1]}: BV={best[1]} warps={best[2]} regs={best[3]} ({best[0]:.2f} us) -> {best_out}")


def sweep_prefill(state_tiles: bool = True) -> None:
    base_c, base_v = dict(tg.CHUNK), dict(tg.CONV)
    lens = [8192]
    print("\nsweep: chunked kernels (CHUNK), us per 8K-token layer")
    trials = [{"prep_warps": w} for w in (4, 8)]
    # state tiles: (16, 8 warps) hit an illegal memory access on the H200 (2026-11-30) and poison the context
    trials += [
        {"state_BV": bv, "state_warps": w, "state_stages": st}
        for bv in (16, 32, 64)
        for w in (2, 4, 8)
        for st in (1, 2)
    ] if state_tiles else []
    trials += [{"out_BV": bv, "out_warps": w, "prep_warps": 4} for bv in (32, 64, 128) for w in (4, 8)]
    trials += [{"BT": 32}]
    for trial in trials:
        tg.CHUNK = dict(base_c, **trial)
        try:
            us = prefill_rows(lens)[0][1]
            print(f"  {trial}: {us:9.1f}")
        except Exception as e:  # a tile that does not fit (shared memory / registers) is just skipped
            print(f"  {trial}: failed ({type(e).__name__}: {str(e)[:80]})")
    tg.CHUNK = base_c
    print("\nsweep: conv (CONV), us: decode C=1 / prefill 8K")
    for bc in (64, 128, 256):
        for bt in (16, 32, 64):
            tg.CONV = dict(base_v, BC=bc, BT=bt)
            d = [r[1] for r in decode_rows(cs=(1,), verify=()) if r[0].startswith("conv")][0]
            p = [r[1] for r in prefill_rows(lens) if r[0].startswith("conv")][0]
            print(f"  BC={bc:3d} BT={bt:2d}: {d:8.2f} / {p:8.1f}")
    tg.CONV = base_v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true", help="sweep tile settings too")
    ap.add_argument("--sweep-prefill", action="store_true", help="only sweep the prefill (chunk, conv) tiles")
    ap.add_argument("--sweep-decode", action="store_true", help="only sweep the decode (recurrent, fused) tiles")
    ap.add_argument("--bvs", default="8,16,32,64,128", help="--sweep-decode: the V block sizes to try")
    ap.add_argument("--sweep-fused", default="",
                    help="only the fused step at these tiles, BV:warps:max registers (0: the compiler's choice) "
                    "comma-separated, e.g. 32:2:0,32:2:168,32:2:128, at --cs lanes and 8 x 4 verify rows")
    ap.add_argument("--best-out", default="", help="--sweep-fused: write the fastest tile at the most lanes here")
    ap.add_argument("--decode-only", action="store_true",
                    help="only the decode rows at --cs lanes (a short run, e.g. under Nsight Compute)")
    ap.add_argument("--cs", default="1,8,64", help="--decode-only, --sweep-fused: lane counts")
    ap.add_argument("--verify-writes", action="store_true",
                    help="only the fused verify step writing its state after every token against once (--cs lanes)")
    args = ap.parse_args()
    if args.verify_writes:
        for c in (int(v) for v in args.cs.split(",")):
            print_table(verify_write_rows(c), f"verify state writes, {c} lanes, per layer")
        return
    if args.sweep_prefill:
        sweep(decode=False)
        return
    if args.sweep_decode:
        sweep_decode(tuple(int(v) for v in args.bvs.split(",")))
        return
    if args.sweep_fused:
        tiles = [tuple(int(v) for v in t.split(":")) for t in args.sweep_fused.split(",")]
        sweep_fused(tiles, cs=tuple(int(c) for c in args.cs.split(",")), best_out=args.best_out)
        return
    if args.decode_only:
        print_table(decode_rows(cs=tuple(int(c) for c in args.cs.split(",")), verify=()), "decode, per layer")
        return
    random.seed(0)
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    print(
        f"copy bandwidth measured now: {copy_bandwidth() / 1e12:.2f} TB/s (floors use {BW / 1e12:.1f} TB/s)"
    )
    print(f"settings: DECODE_TILES {tg.DECODE_TILES}  FUSED_TILES {tg.FUSED_TILES} (up to {tg.FUSED_MAX_TOKENS} "
          f"tokens per sequence)  CHUNK {tg.CHUNK}  CONV {tg.CONV}")
    print_table(decode_rows(), "decode / verify, per layer (CUDA graph, state from HBM)")
    rows = prefill_rows([8192]) + prefill_rows([2048] * 4)
    rows += fla_row([8192])
    print_table(rows, "prefill, per layer (do_bench)")
    for name, us, _ in rows:
        if name.startswith("gdn"):
            print(f"  {name}: {float(name.split()[2]) / us * 1e6:,.0f} tok/s per layer")
    prefill_breakdown([8192])
    if args.sweep:
        sweep()


if __name__ == "__main__":
    main()
