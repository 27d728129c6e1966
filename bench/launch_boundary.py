"""What a kernel boundary costs a decode step, and whether one persistent launch would win it back.

A decode step at one lane is a chain of a few hundred dependent GEMVs, norms and small kernels; the 27B int4 step
sits ~1.7 ms over its byte floor on the H200 with ~450 launches, ~4 us a launch, whatever each one reads. This
measures that cost on a clean chain: P square bf16 GEMVs y_p = W_p y_(p-1) (D x D weights, all of them together
past the L2), in one CUDA graph, each arm the same tile loop:

- `launches`: one launch a GEMV (a program a tile of BN rows), under programmatic dependent launch as the
  engine's kernels are (each waits for its predecessor, then lets its successor launch);
- `launches-nopdl`: the same without it;
- `production`: the engine's own bf16 GEMV (`hinfer.ops.triton.linear.bf16_linear`: the skinny kernel, its
  tiles, its split-K);
- `persistent`: one launch of one program an SM (or `--per-sm` of them) walking the GEMVs in turn, a grid
  barrier between them (each program counts itself in after its tiles, with release; the next GEMV's tiles wait
  for the count: polled by volatile loads, then one acquire); `persistent-prefetch` loads each program's first
  weight block before it waits; `persistent-acquire-poll` polls with acquiring loads instead (an acquiring add
  of 0 compiles to one);
- `no-barrier`: the persistent walk without the barrier (its results are wrong: the streaming bound the barrier
  could at best reach).

Time a GEMV = graph time / P, beside its floor (D x D x 2 bytes at the copy rate measured in the run). If the
persistent walk beats the launches by microseconds a GEMV at D = 1-3K (the int4 projections' bytes), a step
made of fewer, persistent launches is worth building; if not, the boundary is not where a step's time goes.

    python bench/launch_boundary.py [--dims 1024,2048,3072,5120] [--phases 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.ops.triton.common import pdl_start  # noqa: E402


@triton.jit
def _gemv_tile(w_ptr, x_ptr, y_ptr, t, w0, D: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """y[t BN : (t + 1) BN] = W[those rows] @ x, fp32 sums; w0: the tile's first [BN, BK] weight block, loaded by
    the caller (so that it may be in flight before x is ready)."""
    rows = (t * BN + tl.arange(0, BN)).to(tl.int64)
    ks = tl.arange(0, BK)
    x0 = tl.load(x_ptr + ks, cache_modifier=".cg").to(tl.float32)  # written by other programs: past L1
    acc = w0.to(tl.float32) * x0[None, :]
    for k in range(BK, D, BK):
        w = tl.load(w_ptr + rows[:, None] * D + k + ks[None, :])
        x = tl.load(x_ptr + k + ks, cache_modifier=".cg").to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, 1).to(y_ptr.dtype.element_ty))


@triton.jit
def _first_block(w_ptr, t, D: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = (t * BN + tl.arange(0, BN)).to(tl.int64)
    return tl.load(w_ptr + rows[:, None] * D + tl.arange(0, BK)[None, :])


@triton.jit
def _step_kernel(w_ptr, x_ptr, y_ptr, D: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PDL: tl.constexpr):
    """One GEMV, a program a tile."""
    pdl_start(PDL)
    t = tl.program_id(0)
    _gemv_tile(w_ptr, x_ptr, y_ptr, t, _first_block(w_ptr, t, D, BN, BK), D, BN, BK)


@triton.jit
def _chain_kernel(w_ptr, buf_ptr, cnt_ptr, phases, D: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  BARRIER: tl.constexpr, PREFETCH: tl.constexpr, ATOMIC_POLL: tl.constexpr):  # fmt: skip
    """The whole chain in one launch: GEMV p reads buf[p] and writes buf[p + 1]; programs take its tiles in turn
    and meet at a grid barrier (cnt[p]: programs done with GEMV p) before the next one's."""
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    tiles: tl.constexpr = D // BN
    for p in range(phases):
        w = w_ptr + p * D * D  # P D^2 < 2^31 at the sizes run
        w0 = _first_block(w, pid % tiles, D, BN, BK)  # issued before the wait (used only if PREFETCH)
        if BARRIER:
            if p > 0:
                spins = 0
                if ATOMIC_POLL:
                    seen = tl.atomic_add(cnt_ptr + p - 1, 0, sem="acquire")
                    while (seen < progs) & (spins < 1 << 24):  # bounded: a grid not all resident fails the check
                        seen = tl.atomic_add(cnt_ptr + p - 1, 0, sem="acquire")
                        spins += 1
                else:  # volatile loads (no queue at the counter's L2 slice), then one acquire
                    seen = tl.load(cnt_ptr + p - 1, volatile=True)
                    while (seen < progs) & (spins < 1 << 24):
                        seen = tl.load(cnt_ptr + p - 1, volatile=True)
                        spins += 1
                    # the acquire: its result must be used, or the compiler drops the atomic (and its ordering)
                    seen = tl.atomic_add(cnt_ptr + p - 1, 0, sem="acquire")
                    while (seen < progs) & (spins < 1 << 24):
                        seen = tl.atomic_add(cnt_ptr + p - 1, 0, sem="acquire")
                        spins += 1
        for t in range(pid, tiles, progs):
            if PREFETCH and t == pid:  # the block loaded ahead of the wait, not loaded again
                first = w0
            else:
                first = _first_block(w, t, D, BN, BK)
            _gemv_tile(w, buf_ptr + p * D, buf_ptr + (p + 1) * D, t, first, D, BN, BK)
        if BARRIER:
            tl.debug_barrier()  # every thread's stores are done before the count releases them
            tl.atomic_add(cnt_ptr + p, 1, sem="release")


def chain_launches(ws: torch.Tensor, buf: torch.Tensor, bn: int, bk: int, warps: int, pdl: bool) -> None:
    """buf[p + 1] = ws[p] @ buf[p] for every p, one launch each."""
    p_count, d = ws.shape[0], ws.shape[1]
    extra = {"launch_pdl": True} if pdl else {}
    for p in range(p_count):
        _step_kernel[(d // bn,)](ws[p], buf[p], buf[p + 1], D=d, BN=bn, BK=bk, PDL=pdl, num_warps=warps, **extra)


def chain_persistent(ws: torch.Tensor, buf: torch.Tensor, cnt: torch.Tensor, programs: int, bn: int, bk: int,
                     warps: int, barrier: bool = True, prefetch: bool = False, atomic_poll: bool = False,
                     ) -> None:  # fmt: skip
    """The same in one launch of `programs` programs (all resident at once, or the barrier never opens)."""
    p_count, d = ws.shape[0], ws.shape[1]
    cnt.zero_()
    _chain_kernel[(programs,)](ws, buf, cnt, p_count, D=d, BN=bn, BK=bk, BARRIER=barrier, PREFETCH=prefetch,
                               ATOMIC_POLL=atomic_poll, num_warps=warps)  # fmt: skip


def chain_reference(ws: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Every GEMV's output [P + 1, D], fp32 sums rounded to the buffer dtype as the kernels round them."""
    out = [x]
    for w in ws:
        out.append((w.float() @ out[-1].float()).to(x.dtype))
    return torch.stack(out)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="1024,2048,3072,5120", help="the GEMVs' D (weights D x D bf16), comma list")
    ap.add_argument("--phases", type=int, default=32, help="GEMVs in the chain (their weights must pass the L2)")
    ap.add_argument("--tiles", default="8:128:4,16:128:4,32:64:8",
                    help="BN:BK:warps tile configurations, each arm takes its fastest")
    ap.add_argument("--per-sm", default="1,2", help="persistent programs an SM, comma list")
    ap.add_argument("--json", help="write the table here")
    return ap.parse_args()


def measure(d: int, phases: int, tiles: list[tuple[int, int, int]], per_sm: list[int], bw: float,
            sms: int) -> list[dict]:  # fmt: skip
    """Every arm's fastest configuration at D = d: a row each."""
    from bench.linear_kernels import events_median
    from hinfer.ops.triton.linear import bf16_linear

    ws = (torch.randn(phases, d, d, device="cuda") * d**-0.5).bfloat16()
    buf = torch.zeros(phases + 1, d, device="cuda", dtype=torch.bfloat16)
    buf[0] = torch.randn(d, device="cuda").bfloat16()
    want = chain_reference(ws, buf[0])
    cnt = torch.zeros(phases, device="cuda", dtype=torch.int32)
    floor = d * d * 2 / bw
    arms: dict[str, tuple[float, str]] = {}

    def timed(name: str, run, cfg: str, check: bool = True) -> None:
        try:
            buf[1:].zero_()
            run()
            torch.cuda.synchronize()
            err = ((buf.float() - want.float()).norm() / want.float().norm()).item()
            if check and err > 2e-2:
                print(f"  D={d} {name} {cfg}: wrong (rel err {err:.2e}), skipped")
                return
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            t = events_median(graph.replay, reps=20) / phases
        except Exception as e:  # a tile that does not build on this GPU: reported, not fatal
            print(f"  D={d} {name} {cfg}: failed ({type(e).__name__}: {str(e)[:120]})")
            return
        if name not in arms or t < arms[name][0]:
            arms[name] = (t, cfg)

    def production() -> None:
        for p in range(phases):
            bf16_linear(buf[p][None], ws[p], out=buf[p + 1][None])

    for bn, bk, warps in tiles:
        if d % bn or d % bk:
            continue
        cfg = f"BN {bn} BK {bk} warps {warps}"
        for pdl, name in ((True, "launches"), (False, "launches-nopdl")):
            timed(name, functools.partial(chain_launches, ws, buf, bn, bk, warps, pdl), cfg)
        for per in per_sm:
            run = functools.partial(chain_persistent, ws, buf, cnt, sms * per, bn, bk, warps)
            timed("persistent", run, f"{cfg} {per}/SM")
            timed("persistent-prefetch", functools.partial(run, prefetch=True), f"{cfg} {per}/SM")
            timed("persistent-acquire-poll", functools.partial(run, atomic_poll=True), f"{cfg} {per}/SM")
            timed("no-barrier", functools.partial(run, barrier=False), f"{cfg} {per}/SM", check=False)
    timed("production", production, "packaged tiles")
    rows = []
    for name, (t, cfg) in arms.items():
        rows.append({"D": d, "arm": name, "us": t * 1e6, "floor_us": floor * 1e6, "of_floor": floor / t, "config": cfg})
        print(f"  D={d:5d} {name:20s} {t * 1e6:8.2f} us a GEMV ({floor / t:5.1%} of floor {floor * 1e6:.2f}) {cfg}")
    return rows


def main() -> None:
    from bench.linear_kernels import copy_bandwidth

    a = _args()
    torch.manual_seed(0)
    bw = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = [tuple(int(v) for v in s.split(":")) for s in a.tiles.split(",")]
    per_sm = [int(v) for v in a.per_sm.split(",")]
    print(f"{torch.cuda.get_device_name()}: copy {bw / 1e12:.2f} TB/s, {sms} SMs, {a.phases} GEMVs a chain")
    rows = []
    for d in (int(v) for v in a.dims.split(",")):
        rows += measure(d, a.phases, tiles, per_sm, bw, sms)
        torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bw": bw, "phases": a.phases,
                                            "rows": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
