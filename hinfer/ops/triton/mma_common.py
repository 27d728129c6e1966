"""What the Gluon mma.sync skinny kernels share (linear_int4_mma, linear_int4_a8, linear_int4_wgmma, linear_fp8_mma,
moe_int4_mma): the MMA layout and small layout helpers, the PDL wait, the K split of the 128-groups, the epilogue
that stores y or closes split-K by the last program to arrive (linear_splitk's counters), and the bf16 tail rows
a launch computes on CUDA cores beside its tensor-core tiles (the GDN in_proj's b / a rows)."""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from hinfer.ops.triton.common import GROUP as GROUP_K

GROUP = gl.constexpr(GROUP_K)


@gluon.jit
def pdl_start(ON: gl.constexpr):
    """hinfer.ops.triton.common.pdl_start in Gluon: wait for the previous kernel before touching activations or
    outputs (the weights issued before this need no wait: nothing writes them), then let the next one launch."""
    if ON:
        gl.inline_asm_elementwise("griddepcontrol.wait; griddepcontrol.launch_dependents; // $0", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip


@gluon.constexpr_function
def mma_layout(num_warps):
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, 8])


@gluon.jit
def iota4(SIZE: gl.constexpr, DIM: gl.constexpr, L: gl.constexpr):
    """arange(0, SIZE) along dim DIM of a rank-4 layout L (size 1 elsewhere)."""
    if DIM == 0:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, L))))
        r = i[:, None, None, None]
    elif DIM == 1:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(2, gl.SliceLayout(3, L))))
        r = i[None, :, None, None]
    elif DIM == 2:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, L))))
        r = i[None, None, :, None]
    else:
        i = gl.arange(0, SIZE, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, L))))
        r = i[None, None, None, :]
    return r


@gluon.jit
def split_groups(K, SPLIT_K: gl.constexpr, pid_k):
    """The 128-groups [g_lo, g_hi) of K that split pid_k of SPLIT_K takes (the last may take fewer, or none)."""
    n_groups = K // GROUP
    per_split = gl.cdiv(n_groups, SPLIT_K)
    g_lo = pid_k * per_split
    return g_lo, gl.minimum(g_lo + per_split, n_groups)


@gluon.constexpr_function
def flat_smem(rank):
    return gl.SwizzledSharedLayout(1, 1, 1, list(range(rank - 1, -1, -1)))


@gluon.jit
def x_stage(ptrs, g_lo):
    """A program's groups of x read once, into shared memory (int32 words [XG, ...] from a kernel's x stage
    pointers), after the PDL wait: every group's x is then a shared-memory read beside its MMA instead of a round
    trip to L2 after the previous group's MMA. Returns (the buffer, g_lo), the x the kernels' groups take staged."""
    v = gl.load(ptrs)
    R: gl.constexpr = len(v.shape)
    smem = gl.allocate_shared_memory(gl.int32, v.shape, flat_smem(R), v)
    smem = smem._reinterpret(gl.int32, v.shape, flat_smem(R - 1))  # row-major either way: indexed by group
    gl.thread_barrier()  # each group's x is read by every warp
    return smem, g_lo


@gluon.constexpr_function
def vec16_layout(elem_bytes, num_warps):
    # 16 contiguous bytes per thread: the scales / zeros row of a group is copied in 16-byte pieces
    return gl.BlockedLayout([16 // elem_bytes], [32], [num_warps], [0])


@gluon.jit
def store_y(acc, rows, y_ptr, part_ptr, cnt_ptr, M, N, stride_ym, pid_m, pid_n, pid_k, BLOCK_N: gl.constexpr,
             BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr):  # fmt: skip
    """The epilogue: y[m, n] = acc[n, m] (rows: acc's rows of W, in its layout's row slice); split-K partials
    reduced by the last program to arrive, in split order (linear_splitk's counters)."""
    MMA: gl.constexpr = acc.type.layout
    ym = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, MMA))
    out_mask = (ym < M)[None, :] & (rows < N)[:, None]
    y_ptrs = y_ptr + ym[None, :] * stride_ym + rows[:, None]
    if SPLIT_K == 1:
        gl.store(y_ptrs, acc.to(gl.bfloat16), mask=out_mask)
    else:
        p_off = ym[None, :].to(gl.int64) * N + rows[:, None]
        gl.store(part_ptr + pid_k * M * N + p_off, acc, mask=out_mask)
        gl.thread_barrier()  # every thread's partial is written before the release below
        cnt_ptr += pid_m * gl.num_programs(1) + pid_n
        arrived = gl.atomic_add(cnt_ptr, 1, sem="acq_rel")
        if arrived == SPLIT_K - 1:
            total = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
            for i in gl.static_range(SPLIT_K):
                total += gl.load(part_ptr + i * M * N + p_off, mask=out_mask, other=0.0, cache_modifier=".cg")
            gl.store(y_ptrs, total.to(gl.bfloat16), mask=out_mask)
            gl.atomic_xchg(cnt_ptr, 0)


@gluon.jit
def tail_by_row(x_ptr, t_ptr, y_ptr, row0, TAIL_N, M, m0, K, stride_xm, stride_ym, stride_tn,
               BLOCK_M: gl.constexpr, PDL: gl.constexpr):  # fmt: skip
    """y[m, r] = x[m] . tail[r] for num_warps tail rows from row0 (one per warp) and the x rows m0 .. m0 + BLOCK_M,
    on CUDA cores in fp32 (64 bytes per thread and step: K in steps of 1024), rounded once to bf16: rows kept in
    the model dtype (the GDN in_proj's b / a, hinfer.quant.apply.RowSplitWeight) computed in the same launch as
    the int4 rows. Each row is reduced inside its warp (shuffles; no shared memory, no barrier)."""
    W: gl.constexpr = gl.num_warps()
    L: gl.constexpr = gl.BlockedLayout([1, 32], [1, 32], [W, 1], [1, 0])
    CH: gl.constexpr = 1024
    r = row0 + gl.arange(0, W, layout=gl.SliceLayout(1, L))
    kk = gl.arange(0, CH, layout=gl.SliceLayout(0, L))
    pdl_start(PDL)
    for mi in range(m0, gl.minimum(m0 + BLOCK_M, M)):
        acc = gl.zeros([W, CH], gl.float32, layout=L)
        for k0 in range(0, K, CH):
            k_ok = (k0 + kk) < K
            wv = gl.load(t_ptr + r.to(gl.int64)[:, None] * stride_tn + (k0 + kk)[None, :],
                         mask=(r < TAIL_N)[:, None] & k_ok[None, :], other=0.0).to(gl.float32)  # fmt: skip
            xv = gl.load(x_ptr + mi * stride_xm + k0 + kk, mask=k_ok, other=0.0).to(gl.float32)
            acc += wv * xv[None, :]
        gl.store(y_ptr + mi * stride_ym + r, gl.sum(acc, axis=1).to(gl.bfloat16), mask=r < TAIL_N)


@gluon.jit
def tail_by_block(x_ptr, t_ptr, y_ptr, row0, TAIL_N, M, m0, K, stride_xm, stride_ym, stride_tn,
                BLOCK_M: gl.constexpr, PDL: gl.constexpr):  # fmt: skip
    """tail_by_row for every row of x of the block at once: each chunk of the tail rows' weights is loaded once for
    all BLOCK_M rows of x (row by row, a program reloads them for every row and its time grows with the rows),
    the products summed per (row of x, tail row) in fp32 (in another order than tail_by_row) and rounded once."""
    W: gl.constexpr = gl.num_warps()
    CH: gl.constexpr = 128  # K a step: 4 values a thread per row of x (the accumulator: 4 registers a row)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 1, 32], [1, W, 1], [2, 1, 0])  # [x rows, tail rows, K]
    LW: gl.constexpr = gl.SliceLayout(0, L3)
    LX: gl.constexpr = gl.SliceLayout(1, L3)
    LY: gl.constexpr = gl.SliceLayout(2, L3)
    r = row0 + gl.arange(0, W, layout=gl.SliceLayout(1, LW))
    kw = gl.arange(0, CH, layout=gl.SliceLayout(0, LW))
    m = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LX))
    kx = gl.arange(0, CH, layout=gl.SliceLayout(0, LX))
    pdl_start(PDL)
    acc = gl.zeros([BLOCK_M, W, CH], gl.float32, layout=L3)
    for k0 in range(0, K, CH):
        wv = gl.load(t_ptr + r.to(gl.int64)[:, None] * stride_tn + (k0 + kw)[None, :],
                     mask=(r < TAIL_N)[:, None] & ((k0 + kw) < K)[None, :], other=0.0).to(gl.float32)  # fmt: skip
        xv = gl.load(x_ptr + m.to(gl.int64)[:, None] * stride_xm + (k0 + kx)[None, :],
                     mask=(m < M)[:, None] & ((k0 + kx) < K)[None, :], other=0.0).to(gl.float32)  # fmt: skip
        acc += gl.expand_dims(wv, 0) * gl.expand_dims(xv, 1)
    y = gl.sum(acc, axis=2)
    ym = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LY))
    yr = row0 + gl.arange(0, W, layout=gl.SliceLayout(0, LY))
    gl.store(y_ptr + ym.to(gl.int64)[:, None] * stride_ym + yr[None, :], y.to(gl.bfloat16),
             mask=(ym < M)[:, None] & (yr < TAIL_N)[None, :])  # fmt: skip


def tail_rows(tail: torch.Tensor | None, out: torch.Tensor | None, m: int, n: int, k: int) -> int:
    """The bf16 tail rows a launch computes beside the int4 tiles (0 without a tail), checked: a bf16 [T, k] tail
    with unit stride and the whole [m, n + T] output given."""
    if tail is None:
        return 0
    t = tail.shape[0]
    if (out is None or tuple(out.shape) != (m, n + t) or out.stride(-1) != 1 or tail.dtype != torch.bfloat16
            or tail.shape[1] != k or tail.stride(-1) != 1):  # fmt: skip
        raise ValueError(f"int4: a bf16 tail [T, {k}] with unit stride and the whole [{m}, N + T] output")
    return t


# a kernel's timeline probes (a PROBE constexpr): per program PROBE_POINTS int64 stamps, %clock64 at points 0 ..
# PROBE_LAST and the global nanosecond timer at points 0 and PROBE_LAST in the two after (to align programs and
# turn cycles into time)
PROBE_POINTS = gl.constexpr(8)
PROBE_LAST = gl.constexpr(5)


@gluon.jit
def probe_stamp(probe_ptr, point: gl.constexpr, after):
    """%clock64 once the int32 scalar `after` is computed (its producer's latency ends before the stamp), stored as
    this program's stamp `point`; at points 0 and PROBE_LAST %globaltimer too."""
    pid = (gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0) + gl.program_id(0)
    base = probe_ptr + pid * PROBE_POINTS
    t = gl.inline_asm_elementwise("mov.u64 $0, %clock64; // $1", "=l,r", [after], dtype=gl.int64, is_pure=False,
                                  pack=1)  # fmt: skip
    gl.store(base + point, t)
    if point == 0 or point == PROBE_LAST:
        g = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer; // $1", "=l,r", [after], dtype=gl.int64,
                                      is_pure=False, pack=1)  # fmt: skip
        if point == 0:
            gl.store(base + PROBE_LAST + 1, g)
        else:
            gl.store(base + PROBE_LAST + 2, g)
