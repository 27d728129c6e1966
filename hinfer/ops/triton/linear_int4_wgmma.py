"""INT4 W4A16 matmul on Hopper's warpgroup MMA from fragment-ordered weights (Gluon), for 8-64 rows of x.

The mma.sync kernel (linear_int4_mma.py) scales each group's fp32 partial and takes the offset 128 + z off with a
second MMA against ones: at 32 rows (speculative verification of 8 lanes x 4 tokens) its tensor-core work, not
its bytes, sets the time. Here the scale goes into the A operand instead: each weight register becomes
round((u - z) * s) in bf16 (two exact-then-rounded bf16x2 fmas after Marlin's unpack: the value
Int4MmaWeight.dequantize gives), so the groups chain into one accumulator through `wgmma` (m64nBLOCK_Mk16, A from
registers: the fragments the unpack yields are wgmma's register-A layout, which convert_layout(...,
assert_trivial=True) proves) with no per-group fp32 work and no ones MMA. x goes through shared memory (B, K-major),
its columns in the fragments' K order: a 128-wide group at a time through registers (two barriers a group), or,
with the tile's `ring`, copied by cp.async a few groups at a time into two buffers a chunk ahead (one barrier a
chunk, no registers for x). Weights are loaded a group ahead into registers; split-K is reduced in the same launch
by the last program to arrive, as the mma.sync kernel does. With the ring a tile may leave each group's MMA in
flight while the next group unpacks (`async_mma`): the packed A registers an MMA reads are read again after the
wait that retires it (`_hold`), so no compiler may reuse them while it runs (the sm_90 SASS is checked for such
writes by tests/ops/test_int4_wgmma_sass.py), and a chunk's last MMA is waited for before its x buffer is
refilled and before the loop goes round (the chunks are unrolled, two a round: across a back edge the next
iteration's unpack would rewrite the registers). x through registers keeps its MMAs waited.

One program owns BLOCK_N rows of W (64 per warpgroup and repeat), BLOCK_M rows of x and a 1/SPLIT_K slice of
the groups. Reference: x @ Int4MmaWeight.dequantize(bf16)^T in fp32 (the same products, summed in another order).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from hinfer.ops.triton.common import GROUP as GROUP_K
from hinfer.ops.triton.common import pdl_kwargs
from hinfer.ops.triton.linear_int4_mma import GROUP, MAX_M, a_operand, neg_offset, words_layout
from hinfer.ops.triton.linear_splitk import split_scratch
from hinfer.ops.triton.mma_common import iota4, pdl_start, store_y
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.linear import wgmma_config

# x [n, t, kt, k3, k0] (offset 32 t + 4 kt + 2 k3 + k0) -> [n, kt, k3, t, k0] (column 16 kt + 8 k3 + 2 t + k0):
# int4_mma_layout.real_k's order within a group (tests/ops/test_int4_wgmma_order.py replays it)
X_PERM = gl.constexpr((0, 2, 3, 1, 4))


@gluon.jit
def _scale2(s_ptrs):
    """bf16x2 bits (s, s) of the scales at s_ptrs, as int32 (the unpack's operand for rows g or g + 8)."""
    v = gl.load(s_ptrs).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    return (v << 16) | v


@gluon.jit
def _loads(w_ptrs, z_lo, s_lo, g, sg, live, HAS_ZERO: gl.constexpr):
    """Group g's words, negated offsets -(128 + z) and scales (rows g and g + 8 of each stripe, bf16x2 in the
    words' layout); `live` 0 zeroes the scales (a look-ahead past the slice's end adds nothing)."""
    words = gl.load(w_ptrs + g * 2 * GROUP)
    off_lo = neg_offset(z_lo + g * sg, HAS_ZERO)
    off_hi = neg_offset(z_lo + g * sg + 8, HAS_ZERO)
    sc_lo = _scale2(s_lo + g * sg) * live
    sc_hi = _scale2(s_lo + g * sg + 8) * live
    return words, off_lo, off_hi, sc_lo, sc_hi


@gluon.jit
def _k_ordered(xv, BLOCK_M: gl.constexpr):
    """x [BLOCK_M, 128] of one group in the A operand's K order (X_PERM), registers renamed."""
    v = gl.reshape(xv, [BLOCK_M, 4, 8, 2, 2])
    v = gl.permute(v, X_PERM.value)
    return gl.reshape(v, [BLOCK_M, GROUP])


@gluon.jit
def _k_loop(acc, w_ptrs, z_lo, s_lo, sg, x_ptrs, g_lo, g_hi, last, HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr,
            BLOCK_M: gl.constexpr, DOT_A: gl.constexpr, PDL: gl.constexpr):  # fmt: skip
    """acc + the groups g_lo .. g_hi - 1, one wgmma each: the weights a group ahead in registers, x through a
    shared-memory slot (refilled once every warpgroup's MMA that read it is done). Each MMA is waited for: one
    left in flight across the loop's back edge has its A registers rewritten by the next iteration's unpack
    (the same instructions write the same registers; it came out wrong on the H200, and sm_90 SASS shows the
    writes, linear_aot.wgmma_hazards); the overlap comes from programs sharing an SM."""
    XS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, GROUP], XS)
    nw, no_lo, no_hi, ns_lo, ns_hi = _loads(w_ptrs, z_lo, s_lo, gl.minimum(g_lo, last), sg,
                                            (g_lo < g_hi).to(gl.int32), HAS_ZERO)  # fmt: skip
    pdl_start(PDL)
    for g in range(g_lo, g_hi):
        words, o_lo, o_hi, sc_lo, sc_hi = nw, no_lo, no_hi, ns_lo, ns_hi
        nw, no_lo, no_hi, ns_lo, ns_hi = _loads(w_ptrs, z_lo, s_lo, gl.minimum(g + 1, last), sg,
                                                (g + 1 < g_hi).to(gl.int32), HAS_ZERO)  # fmt: skip
        xv = _k_ordered(gl.load(x_ptrs + g * GROUP), BLOCK_M)
        a = a_operand(words, o_lo, o_hi, BLOCK_N, DOT_A, False, False, True, sc_lo, sc_hi)
        gl.thread_barrier()  # every warpgroup is done with the MMA that last read the slot
        x_smem.store(xv)
        fence_async_shared()
        gl.thread_barrier()  # the whole group of x is in shared memory
        acc = warpgroup_mma(a, x_smem.permute((1, 0)), acc)
    return acc


@gluon.jit
def _x_chunk_ptrs(x_ptr, row0, M, stride_xm, BLOCK_M: gl.constexpr, XG: gl.constexpr, W: gl.constexpr):
    """Pointers [XG x BLOCK_M, 128] to XG groups of x (row j BLOCK_M + m: group j, row m), each group's columns
    in the A operand's K order (X_PERM inverted: column 16 kt + 8 k3 + 2 t + k0 reads offset
    32 t + 4 kt + 2 k3 + k0), in pairs: 4-byte cp.async copies."""
    LC: gl.constexpr = gl.BlockedLayout([1, 2], [1, 32], [W, 1], [1, 0])
    r = gl.arange(0, XG * BLOCK_M, layout=gl.SliceLayout(1, LC))[:, None]
    c = gl.arange(0, GROUP, layout=gl.SliceLayout(0, LC))[None, :]
    off = 32 * ((c // 2) % 4) + 4 * (c // 16) + 2 * ((c // 8) % 2) + c % 2
    off = gl.max_contiguous(gl.multiple_of(off, [1, 2]), [1, 2])
    return x_ptr + gl.minimum(row0 + r % BLOCK_M, M - 1) * stride_xm + (r // BLOCK_M) * GROUP + off


@gluon.jit
def _x_copy(x_slots, x_ptrs, c, XG: gl.constexpr):
    """cp.async of chunk c's XG groups of x into x_slots [XG x BLOCK_M, 128] (x_ptrs at the slice's first
    group), one copy op: the compiler puts a barrier between two copies into one buffer."""
    async_copy.async_copy_global_to_shared(x_slots, x_ptrs + c * XG * GROUP)
    async_copy.commit_group()


@gluon.jit
def _x_landed():
    """Wait for this thread's x copies and make them visible to the async proxy (the MMAs' reads); the barrier
    after it publishes every thread's. One asm: a wait_group op would bring the compiler's own barrier along."""
    gl.inline_asm_elementwise("cp.async.wait_all; fence.proxy.async.shared::cta; // $0", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip


@gluon.jit
def _x_chunk_mmas(acc, a_prev, x_slots, g0, g_hi, last, w_ptrs, z_lo, s_lo, sg, nw, no_lo, no_hi, ns_lo, ns_hi,
                  x_next, x_ptrs, c_next, refill, HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_M: gl.constexpr, DOT_A: gl.constexpr, XG: gl.constexpr, ASYNC: gl.constexpr,
                  CARRIED: gl.constexpr = False, LEAVE: gl.constexpr = False):  # fmt: skip
    """The MMAs of groups g0 .. g0 + XG - 1 (their x in x_slots), each group's weights loading the next's. With
    ASYNC each MMA is waited for after the next one is issued: CARRIED, one from the chunk before is in flight on
    entry (a_prev its A; once every warpgroup has retired it, chunk c_next is copied into its buffer x_next if
    `refill`); LEAVE, the last is left in flight on exit (returned with its A), else waited for."""
    for j in gl.static_range(XG):
        g = g0 + j
        words, o_lo, o_hi, sc_lo, sc_hi = nw, no_lo, no_hi, ns_lo, ns_hi
        nw, no_lo, no_hi, ns_lo, ns_hi = _loads(w_ptrs, z_lo, s_lo, gl.minimum(g + 1, last), sg,
                                                (g + 1 < g_hi).to(gl.int32), HAS_ZERO)  # fmt: skip
        a = a_operand(words, o_lo, o_hi, BLOCK_N, DOT_A, False, False, True, sc_lo, sc_hi)
        acc = warpgroup_mma(a, x_slots.slice(j * BLOCK_M, BLOCK_M).permute((1, 0)), acc, is_async=ASYNC)
        if ASYNC:
            if j > 0 or CARRIED:
                acc = warpgroup_mma_wait(1, deps=[acc])  # the group before is done: its A registers are free
                _hold(a_prev)
            if j == 0 and CARRIED:
                gl.thread_barrier()  # every warpgroup is done with the chunk before: its buffer is free
                if refill:
                    _x_copy(x_next, x_ptrs, c_next, XG)
            a_prev = a
    if ASYNC and not LEAVE:
        acc = warpgroup_mma_wait(0, deps=[acc])
        _hold(a_prev)
    return acc, a_prev, nw, no_lo, no_hi, ns_lo, ns_hi


@gluon.jit
def _hold(a):
    """Read A's packed bf16x2 registers (the ones the MMA read) here, after the wait that retires it: PTX leaves
    a write to them while the MMA runs undefined, and a wait's deps keep only the unpacked bf16 elements live."""
    gl.inline_asm_elementwise("// hold $1", "=r,r", [a], dtype=gl.bfloat16, is_pure=False, pack=2)


@gluon.jit
def _k_loop_ring(acc, w_ptrs, z_lo, s_lo, sg, x_ptrs, g_lo, g_hi, last, HAS_ZERO: gl.constexpr,
                 BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, DOT_A: gl.constexpr, PDL: gl.constexpr,
                 XG: gl.constexpr, ASYNC: gl.constexpr):  # fmt: skip
    """_k_loop with x copied XG groups at a time (cp.async) into two buffers, a chunk ahead of its MMAs: one
    barrier per chunk instead of two per group, x never in registers. Two separate buffers, the loop over
    pairs of chunks: the compiler sees the copy into one and the MMAs on the other touch different memory
    (one buffer indexed by chunk would bring a barrier between them). The slice's groups are a multiple of
    2 XG (the host picks XG). With ASYNC the first chunk's last MMA stays in flight into the second chunk, whose
    first wait retires it: x_a is refilled after that (and a barrier), not before the second chunk; the
    second chunk's last MMA is waited for before the loop goes round."""
    XS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    x_a = gl.allocate_shared_memory(gl.bfloat16, [XG * BLOCK_M, GROUP], XS)
    x_b = gl.allocate_shared_memory(gl.bfloat16, [XG * BLOCK_M, GROUP], XS)
    nw, no_lo, no_hi, ns_lo, ns_hi = _loads(w_ptrs, z_lo, s_lo, gl.minimum(g_lo, last), sg,
                                            (g_lo < g_hi).to(gl.int32), HAS_ZERO)  # fmt: skip
    pdl_start(PDL)
    x_ptrs = x_ptrs + g_lo * GROUP
    pairs = (g_hi - g_lo) // (2 * XG)
    a = gl.zeros([BLOCK_N, GROUP], gl.bfloat16, layout=DOT_A)  # no MMA in flight yet
    if pairs > 0:
        _x_copy(x_a, x_ptrs, 0, XG)
    for p in range(pairs):
        _x_landed()
        gl.thread_barrier()  # chunk 2p is in; every warpgroup is done with chunk 2p - 1's MMAs (x_b is free)
        _x_copy(x_b, x_ptrs, 2 * p + 1, XG)
        acc, a, nw, no_lo, no_hi, ns_lo, ns_hi = _x_chunk_mmas(
            acc, a, x_a, g_lo + 2 * p * XG, g_hi, last, w_ptrs, z_lo, s_lo, sg, nw, no_lo, no_hi, ns_lo, ns_hi,
            x_b, x_ptrs, 0, False, HAS_ZERO, BLOCK_N, BLOCK_M, DOT_A, XG, ASYNC, LEAVE=ASYNC)  # fmt: skip
        _x_landed()
        gl.thread_barrier()  # chunk 2p + 1 is in; x_a is free unless its last MMA is in flight
        if not ASYNC:
            if p + 1 < pairs:
                _x_copy(x_a, x_ptrs, 2 * p + 2, XG)
        acc, a, nw, no_lo, no_hi, ns_lo, ns_hi = _x_chunk_mmas(
            acc, a, x_b, g_lo + (2 * p + 1) * XG, g_hi, last, w_ptrs, z_lo, s_lo, sg, nw, no_lo, no_hi, ns_lo,
            ns_hi, x_a, x_ptrs, 2 * p + 2, p + 1 < pairs, HAS_ZERO, BLOCK_N, BLOCK_M, DOT_A, XG, ASYNC,
            CARRIED=ASYNC)  # fmt: skip
    return acc


@gluon.jit
def int4_wgmma_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, stride_xm, stride_ym, stride_sg, stride_sn,
    HAS_ZERO: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT_K: gl.constexpr,
    PDL: gl.constexpr = False, XG: gl.constexpr = 0, ASYNC: gl.constexpr = False,
):  # fmt: skip
    """y[:, :N] = x @ W^T: program (m block, N tile, K slice), rows of x along the fastest grid axis (the blocks
    of one weight tile run together, so all but the first read it from L2)."""
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    pid_k = gl.program_id(2)
    W: gl.constexpr = gl.num_warps()
    S: gl.constexpr = BLOCK_N // 16
    LW: gl.constexpr = words_layout(W)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                   instr_shape=[16, BLOCK_M, 16])  # fmt: skip
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    LX: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [W, 1], [1, 0])  # 16 bytes of a row per thread

    n_groups = K // GROUP
    per_split = gl.cdiv(n_groups, SPLIT_K)
    g_lo = pid_k * per_split
    g_hi = gl.minimum(g_lo + per_split, n_groups)
    last = gl.maximum(g_hi - 1, 0)

    # stripe (pid_n * S + s) starts at its row of [N/16, 2K]; a group is 256 contiguous words of it
    stripe = pid_n * S + iota4(S, 0, LW)
    lane = iota4(32, 2, LW)
    w_ptrs = w_ptr + stripe.to(gl.int64) * (2 * K) + iota4(2, 1, LW) * 128 + lane * 4 + iota4(4, 3, LW)
    row_g = (stripe * 16 + lane // 4) * stride_sn  # row 16 stripe + g of the scales / zeros [G, N]; + 8 below
    z_lo = z_ptr + row_g
    s_lo = s_ptr + row_g
    xm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LX))[:, None]
    kp = gl.arange(0, GROUP, layout=gl.SliceLayout(0, LX))[None, :]
    # rows of x past M re-read row M - 1 (their outputs are not stored): unmasked 16-byte loads in K order
    x_ptrs = x_ptr + gl.minimum(pid_m * BLOCK_M + xm, M - 1) * stride_xm + kp
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=MMA)
    if XG:
        x_ring = _x_chunk_ptrs(x_ptr, pid_m * BLOCK_M, M, stride_xm, BLOCK_M, XG, W)
        acc = _k_loop_ring(acc, w_ptrs, z_lo, s_lo, stride_sg, x_ring, g_lo, g_hi, last, HAS_ZERO, BLOCK_N,
                           BLOCK_M, DOT_A, PDL, XG, ASYNC)  # fmt: skip
    else:
        acc = _k_loop(acc, w_ptrs, z_lo, s_lo, stride_sg, x_ptrs, g_lo, g_hi, last, HAS_ZERO, BLOCK_N, BLOCK_M,
                      DOT_A, PDL)  # fmt: skip

    rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, MMA))
    store_y(acc, rows, y_ptr, part_ptr, cnt_ptr, M, N, stride_ym, pid_m, pid_n, pid_k, BLOCK_N, BLOCK_M, SPLIT_K)


def int4_wgmma_variant(block_n: int, block_m: int, split_k: int, warps: int, zero: bool, pdl: bool = False,
                       xg: int = 0, max_regs: int = 0, async_mma: bool = False):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot)."""
    sig = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*u8" if zero else "*bf16",
           "y_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
           "stride_xm": "i32", "stride_ym": "i32", "stride_sg": "i32", "stride_sn": "i32"}  # fmt: skip
    cex = dict(HAS_ZERO=zero, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split_k, PDL=pdl, XG=xg, ASYNC=async_mma, maxnreg=max_regs)
    name = (f"int4 wgmma{' asym' if zero else ''} BLOCK_N={block_n} BLOCK_M={block_m} split {split_k} w{warps}"
            f"{' pdl' if pdl else ''}{f' x ring {xg}' if xg else ''}{f' maxnreg {max_regs}' if max_regs else ''}"
            f"{' async' if async_mma else ''}")  # fmt: skip
    return name, int4_wgmma_kernel, sig, cex, warps


def x_ring_groups(ring: int, groups: int, split: int) -> int:
    """x's groups per cp.async chunk: the tile's `ring` halved until two chunks divide every K slice's groups
    (the kernel runs pairs of whole chunks); 0 (x through registers) where not even two single groups do."""
    per_split = -(-groups // split)
    last = groups - (split - 1) * per_split
    xg = ring
    while xg and (per_split % (2 * xg) or last % (2 * xg)):
        xg //= 2
    return xg


def int4_wgmma_matmul(x: torch.Tensor, w, out: torch.Tensor | None = None, cfg: SkinnyConfig | None = None
                      ) -> torch.Tensor:  # fmt: skip
    """y [M, N] = x [M, K] @ W^T (bf16), 1 <= M <= 64, W an Int4MmaWeight (fragment order; scales / zeros [G, N],
    bf16 scales). `cfg`: BLOCK_N (a multiple of 16 x warps, warps a multiple of 4), block_m 8 / 16 / 32 / 64,
    split_k, num_warps, num_stages 1 (each MMA waited for), ring: x's groups per cp.async chunk (0: through
    registers, two barriers a group), max_regs: the registers a thread may hold (0: the compiler's count),
    async_mma: with a ring, each group's MMA left in flight while the next group unpacks."""
    m, k = x.shape
    n = w.shape[0]
    if (k != w.shape[1] or k % GROUP_K or not 0 < m <= MAX_M or x.dtype != torch.bfloat16
            or w.scales.dtype != torch.bfloat16 or not hasattr(w, "words")):  # fmt: skip
        raise ValueError(f"int4 wgmma: x [M <= {MAX_M}, K % {GROUP_K} == 0] bf16 and a fragment-ordered W "
                         f"{tuple(w.shape)} with bf16 scales, got {tuple(x.shape)} {x.dtype}")  # fmt: skip
    if x.stride(-1) != 1:
        x = x.contiguous()
    cfg = cfg or wgmma_config(m, n, k)
    block_n, block_m, split, warps = cfg.block_n, cfg.block_m, cfg.split_k, cfg.num_warps
    if (n % block_n or warps % 4 or block_n % (16 * warps) or block_m not in (8, 16, 32, 64)
            or cfg.num_stages != 1):  # fmt: skip
        raise ValueError(f"int4 wgmma: bad tile for N={n}, M={m}: {cfg}")
    if out is None:
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (-(-m // block_m), n // block_n, split)
    part, cnt = split_scratch(split, m, n, grid[0] * grid[1], x, out)
    xg = x_ring_groups(cfg.ring, k // GROUP_K, split)
    int4_wgmma_kernel[grid](
        x, w.words, w.scales, w.zeros if w.zeros is not None else w.scales, out, part, cnt, m, n, k,
        x.stride(0), out.stride(0), n, 1,
        HAS_ZERO=w.zeros is not None, BLOCK_N=block_n, BLOCK_M=block_m, SPLIT_K=split, XG=xg,
        ASYNC=cfg.async_mma and xg > 0,
        num_warps=warps, **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
        **pdl_kwargs(x),
    )  # fmt: skip
    return out
