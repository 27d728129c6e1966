"""Whether a latency-bound kernel can pull the next GEMV's weights into L2 for it.

Much of a decode step at one lane is kernels that keep DRAM idle: the fused GDN step (~7 us a layer on ~6 MB),
norms (~2.6 us exposed each), attention at short depth, the MoE route. The GEMV after each reads its weights
cold. Hopper prefetches to L2 without holding registers (`prefetch.global.L2` a 128-byte line, or
`cp.async.bulk.prefetch.L2` a run of bytes through the copy engine), so a kernel with DRAM to spare could issue
the next weights' bytes and the GEMV would find them in L2 (50 MB).

Each pair: a stand-in for the latency-bound kernel (`_busy_kernel`: one program an SM, under programmatic dependent
launch, spinning for --busy-us on the global timer) that prefetches the next GEMV's weight tensors (none, by
lines, by bulk copies), then the engine's int4 GEMV (`Int4MmaWeight.matmul` at one row, its packaged tiles) on
those weights; pairs in one CUDA graph over weight copies past the L2 (bench/linear_kernels.py). Printed: us a
pair, and beside it the GEMV alone and the busy kernel alone; what prefetching saves a pair is what the step
would save a GEMV.

    python bench/l2_prefetch.py [--shapes o_proj,gdn_in,gate_up] [--busy-us 0,3,7] [--json out.json]
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

LINE = 128  # bytes a line prefetch covers
MODES = ("none", "lines", "bulk")


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _prefetch(base, nbytes, pid, progs, MODE: tl.constexpr, LINES: tl.constexpr):
    """Program pid's share of bytes [0, nbytes) of base into L2: runs of LINES lines (MODE 1) or LINES pieces of
    PIECE bytes (MODE 2, bulk), the programs taking runs in turn."""
    step: tl.constexpr = 128 if MODE == 1 else 16384
    units = nbytes // step  # whole units only (a tail under one is left to the GEMV)
    for start in range(pid * LINES, units, progs * LINES):
        offs = (start + tl.arange(0, LINES)).to(tl.int64)
        offs = tl.minimum(offs, units - 1) * step  # the last run's spare threads repeat the last unit
        ptrs = base + offs
        if MODE == 1:
            tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [ptrs], dtype=tl.int32,
                                      is_pure=False, pack=1)  # fmt: skip
        else:
            tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], 16384; // $0", "=r,l", [ptrs],
                                      dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def _busy_kernel(a_ptr, a_bytes, b_ptr, b_bytes, c_ptr, c_bytes, busy_ns, MODE: tl.constexpr,
                 LINES: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """Wait for the previous kernel, prefetch up to three tensors' bytes (MODE 0: none), then spin busy_ns."""
    pdl_start(PDL)
    t0 = _now()
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    if MODE > 0:
        _prefetch(a_ptr, a_bytes, pid, progs, MODE, LINES)
        _prefetch(b_ptr, b_bytes, pid, progs, MODE, LINES)
        _prefetch(c_ptr, c_bytes, pid, progs, MODE, LINES)
    while _now() - t0 < busy_ns:
        pass


@functools.cache
def _stand_in() -> torch.Tensor:
    return torch.zeros(16, dtype=torch.uint8, device="cuda")


def _bytes_view(t: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """(uint8 view, its bytes); no tensor: (a stand-in, 0 bytes)."""
    if t is None or t.numel() == 0:
        return _stand_in(), 0
    return t.reshape(-1).view(torch.uint8), t.numel() * t.element_size()


def busy(tensors: list[torch.Tensor | None], busy_us: float, mode: str, programs: int, lines: int = 8) -> None:
    """The busy kernel, prefetching `tensors` (up to three) by `mode`."""
    views = [_bytes_view(t) for t in (tensors + [None, None, None])[:3]]
    args = [x for v, n in views for x in (v, n)]
    _busy_kernel[(programs,)](*args, int(busy_us * 1000), MODE=MODES.index(mode), LINES=lines, PDL=True,
                              launch_pdl=True, num_warps=4)  # fmt: skip


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="o_proj,gdn_in,down,gate_up",
                    help="27B projections (bench/linear_kernels.py SHAPES names) and the 35B-A3B's in_proj_35b, "
                         "out_proj_35b")  # fmt: skip
    ap.add_argument("--busy-us", default="0,3,7", help="the busy kernel's spin, us, comma list")
    ap.add_argument("--lines", default="8,32", help="lines (or bulk pieces) a thread's run, comma list")
    ap.add_argument("--json", help="write the rows here")
    return ap.parse_args()


EXTRA = [("in_proj_35b", 12352, 2048), ("out_proj_35b", 2048, 4096)]


def measure(name: str, n: int, k: int, busy_list: list[float], lines_list: list[int], bw: float, sms: int) -> list[dict]:
    """Every (busy time, prefetch mode, run length) pair at one shape."""
    from bench.linear_kernels import _copies, _gen, graph_time, make_weight

    g = _gen(5)
    w, nbytes = make_weight("int4-mma", n, k, g)
    weights = _copies(w, nbytes, 160 << 20)
    x = torch.randn(1, k, generator=g, device="cuda").bfloat16()
    want = w.matmul(x).float()
    gemv = graph_time(lambda wi: wi.matmul(x), weights)
    floor = nbytes / bw
    print(f"  {name} N={n} K={k}: {nbytes / 1e6:.1f} MB, floor {floor * 1e6:.2f} us, GEMV alone {gemv * 1e6:.2f} us")
    rows = []
    for busy_us in busy_list:
        alone = graph_time(lambda wi, b=busy_us: busy([], b, "none", sms), weights)
        for mode in MODES:
            for lines in lines_list if mode != "none" else [0]:

                def pair(wi, b=busy_us, m=mode, ln=lines):
                    busy([wi.words, wi.scales, wi.zeros], b, m, sms, max(ln, 1))
                    return wi.matmul(x)

                got = pair(weights[0]).float()
                err = ((got - want).norm() / want.norm()).item()
                assert err < 1e-3, f"a prefetch changed the GEMV's result (rel err {err:.2e})"
                t = graph_time(pair, weights)
                rows.append({"shape": name, "n": n, "k": k, "bytes": nbytes, "busy_us": busy_us, "mode": mode,
                             "lines": lines, "pair_us": t * 1e6, "busy_alone_us": alone * 1e6,
                             "gemv_alone_us": gemv * 1e6, "floor_us": floor * 1e6})  # fmt: skip
                print(f"    busy {busy_us:4.1f} us (alone {alone * 1e6:5.2f}) + GEMV, prefetch {mode:5s} x{lines:<3d}: "
                      f"{t * 1e6:7.2f} us a pair (GEMV share {(t - alone) * 1e6:6.2f})")  # fmt: skip
    return rows


def main() -> None:
    from bench.linear_kernels import SHAPES, copy_bandwidth

    a = _args()
    bw = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}: copy {bw / 1e12:.2f} TB/s, {sms} SMs")
    busy_list = [float(v) for v in a.busy_us.split(",")]
    lines_list = [int(v) for v in a.lines.split(",")]
    rows = []
    for name, n, k in [s for s in SHAPES + EXTRA if s[0] in a.shapes.split(",")]:
        rows += measure(name, n, k, busy_list, lines_list, bw, sms)
        torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_bw": bw, "rows": rows},
                                           indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
