"""Triton kernels: GDN causal depthwise conv1d (kernel 4) + SiLU over per-slot conv state, and GDN gating.

Conv: one program = one sequence's block of BT tokens x BC channels. The four taps of token t read the inputs
at local positions t-3..t; negative positions come from the old conv state of the sequence's slot. The
program that owns a sequence's first token block is the only one that reads the old state, so it is also the
one that writes the new state(s), after a CTA barrier: no other program can race with it. Decode batches
(every q_len <= SMALL_Q) use a plain (B, channel-blocks) grid with no host-built table, so the launch is the
same every step (CUDA-graph safe); longer batches use a host-built (seq, first token) table per token block.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import interpreted, round_to
from hinfer.ops.triton.gdn_common import gates


@triton.jit
def _tap(xs_ptr, sx_t, p, n, c, cmask, s0, s1, s2):
    """Input at local positions p [BT] (int32) for channels c [BC] -> [BT, BC] fp32 (the x dtype's values);
    xs_ptr points at the sequence's first row. p in -3..-1 reads the old state columns s0..s2 (already rounded
    to the x dtype). Offsets stay int32 (a sequence is < 2^31 elements): fewer registers than int64 addresses."""
    xm = ((p >= 0) & (p < n))[:, None] & cmask[None, :]
    xv = tl.load(xs_ptr + p[:, None] * sx_t + c[None, :], mask=xm, other=0.0).to(tl.float32)
    sv = tl.where((p == -3)[:, None], s0[None, :], tl.where((p == -2)[:, None], s1[None, :], s2[None, :]))
    return tl.where((p < 0)[:, None], sv, xv)


@triton.jit
def _conv_kernel(
    x_ptr, w_ptr, st_ptr, y_ptr, cu_ptr, slot_ptr, step_ptr, tab_ptr,
    C, sx_t, sy_t, sw_c, ss_s, ss_c, step_stride,
    BT: tl.constexpr, BC: tl.constexpr, USE_TAB: tl.constexpr, HAS_STEP: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if USE_TAB:
        b = tl.load(tab_ptr + 2 * pid)
        t0 = tl.load(tab_ptr + 2 * pid + 1)
    else:
        b = pid
        t0 = pid * 0
    start = tl.load(cu_ptr + b)
    n = tl.load(cu_ptr + b + 1) - start
    xs = x_ptr + start.to(tl.int64) * sx_t
    ys = y_ptr + start.to(tl.int64) * sy_t
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    cm = c < C
    x_dt: tl.constexpr = x_ptr.dtype.element_ty
    w_dt: tl.constexpr = w_ptr.dtype.element_ty
    first = t0 == 0

    # old state (only the first block needs it), rounded to the x dtype as the reference's torch.cat does
    slot = tl.load(slot_ptr + b)
    sp = st_ptr + slot * ss_s + c * ss_c
    s0 = round_to(tl.load(sp, mask=cm & first, other=0.0).to(tl.float32), x_dt, EMU)
    s1 = round_to(tl.load(sp + 1, mask=cm & first, other=0.0).to(tl.float32), x_dt, EMU)
    s2 = round_to(tl.load(sp + 2, mask=cm & first, other=0.0).to(tl.float32), x_dt, EMU)

    wp = w_ptr + c * sw_c
    t = t0 + tl.arange(0, BT)
    acc = tl.zeros([BT, BC], tl.float32)
    for i in tl.static_range(4):
        wi = tl.load(wp + i, mask=cm, other=0.0).to(tl.float32)
        xi = round_to(_tap(xs, sx_t, t - 3 + i, n, c, cm, s0, s1, s2), w_dt, EMU)
        acc += wi[None, :] * xi
    acc = round_to(acc, w_dt, EMU)  # F.conv1d returns the weight dtype
    y = acc / (1.0 + tl.exp(-acc))
    ym = (t < n)[:, None] & cm[None, :]
    tl.store(ys + t[:, None] * sy_t + c[None, :], round_to(y, y_ptr.dtype.element_ty, EMU), mask=ym)

    if first:
        # every thread's reads of the old state land before any thread overwrites a slot
        tl.debug_barrier()
        if HAS_STEP:
            j_lo = n - n
        else:
            j_lo = n - 1
        st_dt: tl.constexpr = st_ptr.dtype.element_ty
        j0 = j_lo
        while j0 < n:  # a while loop: Triton's interpreter cannot range() over a loaded scalar
            j = j0 + tl.arange(0, BT)
            jm = j < n
            if HAS_STEP:
                # the state after token j goes to step[j]; a run of equal slots keeps only its last write
                dst = tl.load(step_ptr + b * step_stride + j, mask=jm, other=0)
                nxt = tl.load(step_ptr + b * step_stride + j + 1, mask=(j + 1) < n, other=-1)
                wr = jm & ((j == n - 1) | (dst != nxt))
            else:
                dst = tl.zeros([BT], tl.int64) + slot
                wr = jm
            for i in tl.static_range(3):
                val = _tap(xs, sx_t, j - 2 + i, n, c, cm, s0, s1, s2)
                tl.store(
                    st_ptr + dst[:, None] * ss_s + c[None, :] * ss_c + i,
                    round_to(val, st_dt, EMU).to(st_dt),
                    mask=wr[:, None] & cm[None, :],
                )
            j0 += BT


def causal_conv1d_launch(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, y: torch.Tensor,
    cu_q_lens: torch.Tensor, gdn_slots: torch.Tensor, step_slots: torch.Tensor | None, q_lens: list[int],
    small_q: int, bt_long: int, bc: int, num_warps: int,
) -> None:  # fmt: skip
    """Launch the conv kernel; `q_lens` (host) sizes the grid, every index is read on the device."""
    c_dim, w = weight.shape
    if w != 4 or conv_state.shape[-1] != 3:
        raise ValueError(f"the Triton conv1d supports kernel width 4 only, got {w}")
    if x.stride(-1) != 1 or y.stride(-1) != 1 or conv_state.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("causal_conv1d needs unit stride along channels / taps")
    max_q = max(q_lens)
    if max_q <= small_q:
        bt, tab, rows = max(2, triton.next_power_of_2(max_q)), None, len(q_lens)
    else:
        bt = bt_long
        pairs = [(b, t0) for b, n in enumerate(q_lens) for t0 in range(0, n, bt)]
        tab = torch.tensor(pairs, dtype=torch.int32).to(x.device, non_blocking=True)
        rows = len(pairs)
    step = step_slots if step_slots is not None else gdn_slots
    grid = (rows, triton.cdiv(c_dim, bc))
    _conv_kernel[grid](
        x, weight, conv_state, y, cu_q_lens, gdn_slots, step, tab if tab is not None else cu_q_lens,
        c_dim, x.stride(0), y.stride(0), weight.stride(0), conv_state.stride(0), conv_state.stride(1),
        step.stride(0) if step_slots is not None else 0,
        BT=bt, BC=bc, USE_TAB=tab is not None, HAS_STEP=step_slots is not None,
        EMU=interpreted(_conv_kernel), num_warps=num_warps,
    )  # fmt: skip


@triton.jit
def _gating_kernel(
    a_ptr, b_ptr, alog_ptr, dtb_ptr, g_ptr, beta_ptr, N, HV, sa_t, sb_t,
    BLOCK: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    t = i // HV
    h = i % HV
    a = tl.load(a_ptr + t * sa_t + h, mask=m, other=0.0).to(tl.float32)
    bb = tl.load(b_ptr + t * sb_t + h, mask=m, other=0.0).to(tl.float32)
    a_log = tl.load(alog_ptr + h, mask=m, other=0.0).to(tl.float32)
    dtb = tl.load(dtb_ptr + h, mask=m, other=0.0).to(tl.float32)
    g, beta = gates(a, bb, -tl.exp(a_log), dtb, b_ptr.dtype.element_ty, EMU)
    tl.store(g_ptr + i, g, mask=m)
    tl.store(beta_ptr + i, beta, mask=m)


def gdn_gating_launch(
    a: torch.Tensor,
    b: torch.Tensor,
    a_log: torch.Tensor,
    dt_bias: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> None:
    t, hv = a.shape
    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError("gdn_gating needs unit stride along heads")
    n = t * hv
    block = 1024
    _gating_kernel[(triton.cdiv(n, block),)](
        a, b, a_log, dt_bias, g, beta, n, hv, a.stride(0), b.stride(0),
        BLOCK=block, EMU=interpreted(_gating_kernel), num_warps=4,
    )  # fmt: skip
