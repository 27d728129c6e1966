"""Triton: one Gated DeltaNet step for short sequences (decode, speculative verify) in one kernel: the causal
conv + SiLU of q, k and v, the gates g and beta, the gated delta rule and the output norm gated by silu(z), where
the separate kernels take four launches (gdn_conv.py's conv and gating, gdn_recurrent.py's rule, norm.py's
gated norm) and a round trip of q, k, v, g and beta.

Grid (sequence, value head, V block), as the recurrent kernel: each program keeps its [K, BV] block of the
head's fp32 state in registers for all of the sequence's tokens, and convolves the channels it reads itself:
its key head's q and k (K each) and its BV v channels, over the old conv state (three inputs per channel) and
the sequence's new inputs. The numerics are the separate kernels' step for step (conv in the weight dtype, its
output and beta rounded as theirs), so the fused step equals them up to fma contraction.

Conv state: a program's v channels are its own (read, then written by it alone). The q and k channels of a key
head are read by all REP x V/BV programs of its value heads, and in place (the new state goes to the slot it
came from) a write could overtake another program's read: each program takes an arrival ticket after its reads
(one counter per sequence and key head), and the last to arrive writes them and resets the counter. With step
slots (speculative verify) the state after token j goes to step[j], a run of equal slots keeping its last.

Output norm: it spans a head's V, split over V/BV programs; each takes a second ticket (per sequence and value
head) after storing its o block, and the last reads the head's o rows back and writes the normalised, gated rows.
With BV = V one program holds the whole row and normalises it as it goes: no ticket, no reading back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import cast, interpreted, pdl_kwargs, pdl_start, round_to, zeroed_counters
from hinfer.ops.triton.gdn_common import delta_rule_step, gates, store_token

ARRIVALS = 1 << 16  # arrival counters (sequences x key heads per launch, at most)


def arrival_counters(device: torch.device) -> torch.Tensor:
    """The fused GDN step's arrival counters (ARRIVALS of them, common.zeroed_counters)."""
    return zeroed_counters("gdn decode", ARRIVALS, device)


@triton.jit
def _old(cs, X_DT: tl.constexpr, EMU: tl.constexpr):
    """The old conv state's three inputs at pointers cs (a channel vector's), in the x dtype as the reference's
    torch.cat rounds them."""
    s0 = round_to(tl.load(cs).to(tl.float32), X_DT, EMU)
    s1 = round_to(tl.load(cs + 1).to(tl.float32), X_DT, EMU)
    s2 = round_to(tl.load(cs + 2).to(tl.float32), X_DT, EMU)
    return s0, s1, s2


@triton.jit
def _taps(w_ptrs):
    """The conv's four weights of the channels at w_ptrs, in fp32."""
    return (tl.load(w_ptrs).to(tl.float32), tl.load(w_ptrs + 1).to(tl.float32), tl.load(w_ptrs + 2).to(tl.float32),
            tl.load(w_ptrs + 3).to(tl.float32))  # fmt: skip


@triton.jit
def _token(xs, sx_t, j, n, cq, ck, cv, a_ptr, sa_t, b_ptr, sb_t, t, h):
    """Token j's inputs (its q, k, v channels and gate inputs a, b), read only while j < n: loaded a token ahead,
    so that they are not waiting behind the ticket."""
    ok = j < n
    xq = tl.load(xs + j * sx_t + cq, mask=ok, other=0.0).to(tl.float32)
    xk = tl.load(xs + j * sx_t + ck, mask=ok, other=0.0).to(tl.float32)
    xv = tl.load(xs + j * sx_t + cv, mask=ok, other=0.0).to(tl.float32)
    ga = tl.load(a_ptr + t * sa_t + h, mask=ok, other=0.0).to(tl.float32)
    gb = tl.load(b_ptr + t * sb_t + h, mask=ok, other=0.0).to(tl.float32)
    return xq, xk, xv, ga, gb


@triton.jit
def _conv(w, s0, s1, s2, x, W_DT: tl.constexpr, Y_DT: tl.constexpr, EMU: tl.constexpr):
    """silu(sum_i w_i * in_i) over the inputs (s0, s1, s2, x) oldest first: the conv kernel's arithmetic (w: the
    four taps, _taps)."""
    acc = w[0] * round_to(s0, W_DT, EMU)
    acc += w[1] * round_to(s1, W_DT, EMU)
    acc += w[2] * round_to(s2, W_DT, EMU)
    acc += w[3] * round_to(x, W_DT, EMU)
    acc = round_to(acc, W_DT, EMU)  # F.conv1d returns the weight dtype
    return round_to(acc / (1.0 + tl.exp(-acc)), Y_DT, EMU)


@triton.jit
def _save_conv(cs_ptr, c, xs_ptr, sx_t, s0, s1, s2, n, slot, step_ptr, step_stride, b, ss_s, ss_c,
               HAS_STEP: tl.constexpr, EMU: tl.constexpr):  # fmt: skip
    """Write the conv state of channels c: the last three inputs after the last token, or after every token j to
    step[j] (a run of equal slots: its last). Inputs at positions < 0 are the old state's s0..s2."""
    st_dt: tl.constexpr = cs_ptr.dtype.element_ty
    if HAS_STEP:
        j = n - n
    else:
        j = n - 1
    while j < n:  # a while loop: Triton's interpreter cannot range() over a loaded scalar
        if HAS_STEP:
            dst = tl.load(step_ptr + b * step_stride + j)
            nxt = tl.load(step_ptr + b * step_stride + j + 1, mask=j + 1 < n, other=-1)
            wr = (j == n - 1) | (dst != nxt)
        else:
            dst = slot
            wr = j == j
        if wr:
            for i in tl.static_range(3):
                p = j - 2 + i
                xv = tl.load(xs_ptr + p * sx_t + c, mask=(c >= 0) & (p >= 0), other=0.0).to(tl.float32)
                old = tl.where(p == -3, s0, tl.where(p == -2, s1, s2))
                val = tl.where(p < 0, old, xv)
                tl.store(cs_ptr + dst * ss_s + c * ss_c + i, round_to(val, st_dt, EMU).to(st_dt))
        j += 1


@triton.jit
def _gated_norm(x, z, w, eps, V: tl.constexpr, DT: tl.constexpr, ROUND_WY: tl.constexpr, EMU: tl.constexpr):
    """The GDN output norm of one head's row (norm.py's gated mode, op for op), fp32 x [V] as stored (rounded to
    DT), z and w: y = w * (x rstd) rounded, times silu(z)."""
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / V + eps)
    y = w * round_to(x * rstd, DT, EMU)
    if ROUND_WY:  # weight * y is rounded when its promoted dtype is the model dtype
        y = round_to(y, DT, EMU)
    return y * (z / (1.0 + tl.exp(-z)))


@triton.jit
def _norm_rows(o_ptr, so_t, z_ptr, sz_t, w_ptr, y_ptr, n, eps, V: tl.constexpr, ROUND_WY: tl.constexpr,
               EMU: tl.constexpr):  # fmt: skip
    """The GDN output norm of one head over n tokens, o rows read back from global memory (the other programs'
    blocks)."""
    d = tl.arange(0, V)
    dt: tl.constexpr = y_ptr.dtype.element_ty
    w = tl.load(w_ptr + d).to(tl.float32)
    j = n - n
    while j < n:
        x = tl.load(o_ptr + j * so_t + d, cache_modifier=".cg").to(tl.float32)
        z = tl.load(z_ptr + j * sz_t + d).to(tl.float32)
        tl.store(y_ptr + j * so_t + d, cast(_gated_norm(x, z, w, eps, V, dt, ROUND_WY, EMU), dt, EMU))
        j += 1


@triton.jit
def _fused_kernel(
    x_ptr, a_ptr, b_ptr, alog_ptr, dtb_ptr, cw_ptr, cs_ptr, s_ptr, o_ptr, cnt_ptr, cu_ptr, slot_ptr, step_ptr,
    z_ptr, nw_ptr, y_ptr,
    sx_t, sa_t, sb_t, scw_c, scs_s, scs_c, so_t, so_h, ss_s, ss_h, ss_k, step_stride, sz_t, sz_h, HK,
    scale, eps,
    REP: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, HAS_STEP: tl.constexpr,
    EMU: tl.constexpr, NORM: tl.constexpr = False, ROUND_WY: tl.constexpr = True, PDL: tl.constexpr = False,
    EARLY: tl.constexpr = False,
):  # fmt: skip
    if not EARLY:
        pdl_start(PDL)
    b = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    slot = tl.load(slot_ptr + b)
    start = tl.load(cu_ptr + b).to(tl.int64)
    n = tl.load(cu_ptr + b + 1).to(tl.int64) - start
    hk = h // REP
    rk = tl.arange(0, K)
    rv = vb * BV + tl.arange(0, BV)
    cq = hk * K + rk  # channels of qkv: q [HK K] | k [HK K] | v [HV V]
    ck = HK * K + cq
    cv = 2 * HK * K + h * V + rv
    x_dt: tl.constexpr = x_ptr.dtype.element_ty
    w_dt: tl.constexpr = cw_ptr.dtype.element_ty
    # the state block first: this program's alone, and the largest read (loads after the acquiring ticket below
    # could not start before it returns)
    s_off = h * ss_h + rk[:, None] * ss_k + rv[None, :]
    state = tl.load(s_ptr + slot * ss_s + s_off)  # [K, BV] fp32
    neg_a = -tl.exp(tl.load(alog_ptr + h).to(tl.float32))
    dtb = tl.load(dtb_ptr + h).to(tl.float32)
    cs = cs_ptr + slot * scs_s
    q0, q1, q2 = _old(cs + cq * scs_c, x_dt, EMU)
    k0, k1, k2 = _old(cs + ck * scs_c, x_dt, EMU)
    v0, v1, v2 = _old(cs + cv * scs_c, x_dt, EMU)
    wq, wk, wv = _taps(cw_ptr + cq * scw_c), _taps(cw_ptr + ck * scw_c), _taps(cw_ptr + cv * scw_c)
    if EARLY:  # all read so far was written before the previous kernel began: only the inputs wait for it
        pdl_start(PDL)
    xs = x_ptr + start * sx_t
    xq, xk, xv, ga, gb = _token(xs, sx_t, 0, n, cq, ck, cv, a_ptr, sa_t, b_ptr, sb_t, start, h)
    # the old q / k state is read: take a ticket (the last of the key head's programs writes the new one). Release
    # only: nothing after it waits for its answer but the last program's writes, which acquire first (below)
    tl.debug_barrier()  # every thread's reads are done before the ticket releases them
    arrived = tl.atomic_add(cnt_ptr + b * HK + hk, 1, sem="release")
    last = arrived == REP * (V // BV) - 1
    if NORM and BV == V:
        nw = tl.load(nw_ptr + rv).to(tl.float32)
    p0, p1, p2 = q0, q1, q2  # the three inputs before the current token, per channel group
    r0, r1, r2 = k0, k1, k2
    u0, u1, u2 = v0, v1, v2
    j = n - n
    while j < n:
        t = start + j
        q = _conv(wq, p0, p1, p2, xq, w_dt, x_dt, EMU)
        k = _conv(wk, r0, r1, r2, xk, w_dt, x_dt, EMU)
        v = _conv(wv, u0, u1, u2, xv, w_dt, x_dt, EMU)
        p0, p1, p2 = p1, p2, xq
        r0, r1, r2 = r1, r2, xk
        u0, u1, u2 = u1, u2, xv
        g, beta = gates(ga, gb, neg_a, dtb, b_ptr.dtype.element_ty, EMU)
        xq, xk, xv, ga, gb = _token(xs, sx_t, j + 1, n, cq, ck, cv, a_ptr, sa_t, b_ptr, sb_t, t + 1, h)
        state, o = delta_rule_step(state, q, k, v, g, beta, scale)
        store_token(o_ptr + t * so_t + h * so_h + rv, o, state, s_ptr, s_off, ss_s, step_ptr, step_stride, b, j, n,
                    HAS_STEP, EMU)  # fmt: skip
        if NORM and BV == V:  # the program holds the head's whole row: its norm needs no other program
            zj = tl.load(z_ptr + t * sz_t + h * sz_h + rv).to(tl.float32)
            x = round_to(o, o_ptr.dtype.element_ty, EMU)  # as the row the other path reads back
            yj = _gated_norm(x, zj, nw, eps, V, y_ptr.dtype.element_ty, ROUND_WY, EMU)
            tl.store(y_ptr + t * so_t + h * so_h + rv, cast(yj, y_ptr.dtype.element_ty, EMU))
        j += 1
    if not HAS_STEP:
        tl.store(s_ptr + slot * ss_s + s_off, state)
    _save_conv(cs_ptr, cv, xs, sx_t, v0, v1, v2, n, slot, step_ptr, step_stride, b, scs_s, scs_c, HAS_STEP, EMU)
    if last:  # every other program's reads of the old q / k state happened before its ticket: acquire them
        tl.atomic_xchg(cnt_ptr + b * HK + hk, 0, sem="acquire")  # (and reset the counter for the next launch)
        _save_conv(cs_ptr, cq, xs, sx_t, q0, q1, q2, n, slot, step_ptr, step_stride, b, scs_s, scs_c, HAS_STEP,
                   EMU)  # fmt: skip
        _save_conv(cs_ptr, ck, xs, sx_t, k0, k1, k2, n, slot, step_ptr, step_stride, b, scs_s, scs_c, HAS_STEP,
                   EMU)  # fmt: skip
    if NORM and BV < V:  # the head's last program to finish normalises its whole rows (all V blocks written by then)
        tl.debug_barrier()  # every thread's o stores are done before the ticket releases them
        # after the q / k counters: grid (sequences, value heads, V blocks)
        head_cnt = cnt_ptr + tl.num_programs(0) * HK + b * tl.num_programs(1) + h
        if tl.atomic_add(head_cnt, 1, sem="release") == V // BV - 1:
            tl.atomic_xchg(head_cnt, 0, sem="acquire")  # the other blocks' o rows, before reading them back
            _norm_rows(o_ptr + start * so_t + h * so_h, so_t, z_ptr + start * sz_t + h * sz_h, sz_t, nw_ptr,
                       y_ptr + start * so_t + h * so_h, n, eps, V, ROUND_WY, EMU)  # fmt: skip


def fused_decode_launch(
    qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
    conv_weight: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor, o: torch.Tensor,
    cu_q_lens: torch.Tensor, gdn_slots: torch.Tensor, step_slots: torch.Tensor | None, num_seqs: int,
    hk: int, bv: int, num_warps: int, max_regs: int = 0,
    norm: tuple[torch.Tensor, torch.Tensor, torch.Tensor, float] | None = None, early: bool = False,
) -> None:  # fmt: skip
    """o [T, HV, V] for a batch of short sequences; conv_state / ssm_state updated as the separate kernels do.
    `norm` = (z [T, HV, V], weight [V], y [T, HV, V], eps): also y = the GDN output norm of o gated by silu(z).
    `early`: under programmatic dependent launch, read the slots, the state block, the gates' parameters and the
    conv taps and old state before waiting for the previous kernel, which writes only the inputs (qkv, a, b, z):
    the state, conv state and slots were written before it began (it launches this kernel once its own
    wait is over, so everything before it has finished). `max_regs`: the launch's register cap (maxnreg; 0: the
    compiler's choice), so that more programs fit an SM where many sequences launch many of them."""
    hv, vd = o.shape[1], o.shape[2]
    kd = ssm_state.shape[-2]
    bv = min(bv, vd)
    if conv_weight.shape[1] != 4 or conv_state.shape[-1] != 3:
        raise ValueError("the fused GDN step supports conv kernel width 4 only")
    if qkv.shape[1] != 2 * hk * kd + hv * vd or vd % bv or ssm_state.shape[-2:] != (kd, vd):
        raise ValueError(f"gdn decode: qkv {tuple(qkv.shape)} does not hold {hk} x {kd} q / k and {hv} x {vd} v")
    if num_seqs * (hk + hv) > ARRIVALS:
        raise ValueError(f"gdn decode: {num_seqs} sequences x {hk + hv} heads exceed {ARRIVALS} counters")
    z, w, y, eps = norm if norm is not None else (o, o, o, 0.0)
    if norm is not None and (z.shape != o.shape or y.shape != o.shape or z.stride(-1) != 1 or w.numel() != vd):
        raise ValueError("gdn decode: the norm's z and output are [T, HV, V], its weight [V], unit last stride")
    if min(t.stride(-1) for t in (qkv, a, b, conv_weight, conv_state, ssm_state, o)) != 1:
        raise ValueError("gdn decode needs unit stride along the last dimension")
    step = step_slots if step_slots is not None else gdn_slots
    _fused_kernel[(num_seqs, hv, vd // bv)](
        qkv, a, b, a_log, dt_bias, conv_weight, conv_state, ssm_state, o, arrival_counters(qkv.device),
        cu_q_lens, gdn_slots, step, z, w, y,
        qkv.stride(0), a.stride(0), b.stride(0), conv_weight.stride(0), conv_state.stride(0), conv_state.stride(1),
        o.stride(0), o.stride(1), ssm_state.stride(0), ssm_state.stride(1), ssm_state.stride(2),
        step.stride(0) if step_slots is not None else 0, z.stride(0), z.stride(1), hk,
        kd**-0.5, eps,
        REP=hv // hk, K=kd, V=vd, BV=bv, HAS_STEP=step_slots is not None, EMU=interpreted(_fused_kernel),
        NORM=norm is not None, ROUND_WY=torch.promote_types(w.dtype, o.dtype) == o.dtype, EARLY=early,
        num_warps=num_warps, **({"maxnreg": max_regs} if max_regs else {}), **pdl_kwargs(qkv),
    )  # fmt: skip
