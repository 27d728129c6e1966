"""Triton chunked gated delta rule for long sequences (prefill chunks), varlen, slot-indexed state.

Within a chunk of BT tokens (local cumulative log-decay gc_t = sum_{i<=t} g_i) the recurrence is solved in
closed form (the WY / UT-transform formulation):
    A[t,i] = beta_t exp(gc_t - gc_i) k_t.k_i  (i < t),   X = (I + A)^-1
    w = X (beta exp(gc) * K),   u = X (beta * V),   U = u - w S0          (the per-token deltas)
    O = exp(gc) * (Q S0) + (causal exp(gc_t - gc_i) Q K^T) U
    S_end = exp(gc_last) S0 + (exp(gc_last - gc) * K)^T U
Three kernels: `_prep` (parallel over chunks x heads: X, w, u, gc), `_state` (sequential over each
sequence's chunks, parallel over heads x V blocks: S at each chunk start, U over u, the final state),
`_out` (parallel over chunks x heads x V blocks: O). X is built without a 64-step loop: the four 16x16
diagonal blocks are inverted together (a [4, 16, 16] batch) by 15 steps of forward substitution, one small
batched dot each, then X = (I - F + F^2 - F^3) Xd with F = Xd E (E the strictly block-lower part; F^4 = 0).
Dots use `PREC` (tf32 on the GPU by default: operands are bf16-born and the output is bf16).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import interpreted, round_to
from hinfer.ops.triton.gdn_common import l2norm


@triton.jit
def _load_rows(ptr, tok0, ln, s_t, col0, BT: tl.constexpr, N: tl.constexpr):
    """Rows tok0..tok0+BT-1 (masked to ln) of a [T, *] view, columns col0..col0+N-1 -> [BT, N] fp32."""
    r = tl.arange(0, BT)
    cols = col0 + tl.arange(0, N)
    return tl.load(ptr + (tok0 + r)[:, None] * s_t + cols[None, :], mask=(r < ln)[:, None], other=0.0).to(
        tl.float32
    )


@triton.jit
def _inv_diag_blocks(kn, beta, gc, BT: tl.constexpr, SUB: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr):
    """(I + D)^-1 for D the SUBxSUB diagonal blocks of A, returned as a block-diagonal [BT, BT] matrix.
    The blocks are solved together as a batch [NB, SUB, SUB] by SUB-1 steps of forward substitution:
    step i fixes row i of every block from its rows < i (one small batched dot per step)."""
    NB: tl.constexpr = BT // SUB
    k3 = tl.reshape(kn, (NB, SUB, K))
    b3 = tl.reshape(beta, (NB, SUB))
    g3 = tl.reshape(gc, (NB, SUB))
    ri = tl.arange(0, SUB)
    low = (ri[:, None] > ri[None, :])[None, :, :]
    dec = tl.exp(tl.where(low, g3[:, :, None] - g3[:, None, :], 0.0))
    d = tl.dot(k3, tl.permute(k3, (0, 2, 1)), input_precision=PREC) * b3[:, :, None] * dec
    d = tl.where(low, d, 0.0)
    eye = tl.where((ri[:, None] == ri[None, :])[None, :, :], 1.0, 0.0) + tl.zeros((NB, SUB, SUB), tl.float32)
    x = eye
    for i in range(1, SUB):
        x = tl.where((ri == i)[None, :, None], eye - tl.dot(d, x, input_precision=PREC), x)
    # scatter the blocks onto the diagonal of [BT, BT]: [NB, SUB, NB, SUB] with zeros off the diagonal
    nb = tl.arange(0, NB)
    on_diag = (nb[:, None] == nb[None, :])[:, None, :, None]
    return tl.reshape(tl.where(on_diag, x[:, :, None, :], 0.0), (BT, BT))


@triton.jit
def _prep_kernel(
    k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, gc_ptr, ctab_ptr,
    sk_t, sk_h, sv_t, sv_h, sg_t, sb_t,
    HV: tl.constexpr, REP: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    SUB: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0)
    h = tl.program_id(1)
    tok0 = tl.load(ctab_ptr + 2 * c).to(tl.int64)
    ln = tl.load(ctab_ptr + 2 * c + 1)
    r = tl.arange(0, BT)
    rm = r < ln
    kn = l2norm(_load_rows(k_ptr + (h // REP) * sk_h, tok0, ln, sk_t, 0, BT, K), 1)
    v = _load_rows(v_ptr + h * sv_h, tok0, ln, sv_t, 0, BT, V)
    beta = tl.load(beta_ptr + (tok0 + r) * sb_t + h, mask=rm, other=0.0)
    gc = tl.cumsum(tl.load(g_ptr + (tok0 + r) * sg_t + h, mask=rm, other=0.0), 0)

    low = r[:, None] > r[None, :]
    decay = tl.exp(tl.where(low, gc[:, None] - gc[None, :], 0.0))
    a = tl.where(low, tl.dot(kn, tl.trans(kn), input_precision=PREC) * beta[:, None] * decay, 0.0)
    same = (r[:, None] // SUB) == (r[None, :] // SUB)
    xd = _inv_diag_blocks(kn, beta, gc, BT, SUB, K, PREC)
    # X = (I + F)^-1 Xd with F = Xd E, E the strictly block-lower part of A (F^4 = 0 for 4 blocks)
    eye = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    f = tl.dot(xd, tl.where(same, 0.0, a), input_precision=PREC)
    f2 = tl.dot(f, f, input_precision=PREC)
    f3 = tl.dot(f, f2, input_precision=PREC)
    x = tl.dot(eye - f + f2 - f3, xd, input_precision=PREC)

    w = tl.dot(x, kn * (beta * tl.exp(gc))[:, None], input_precision=PREC)
    u = tl.dot(x, v * beta[:, None], input_precision=PREC)
    base = c.to(tl.int64) * HV + h
    tl.store(w_ptr + base * BT * K + r[:, None] * K + tl.arange(0, K)[None, :], w)
    tl.store(u_ptr + base * BT * V + r[:, None] * V + tl.arange(0, V)[None, :], u)
    tl.store(gc_ptr + base * BT + r, gc)


@triton.jit
def _state_step(
    c, state, k_ptr, w_ptr, u_ptr, gc_ptr, h_ptr, ctab_ptr, sk_t, h, rv,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One chunk: save the chunk-start state for _out, turn u into the deltas U = u - w S in place (so _out
    needs neither w nor a second w S product), then advance the state over the chunk."""
    r = tl.arange(0, BT)
    rk = tl.arange(0, K)
    base = c.to(tl.int64) * HV + h
    tl.store(h_ptr + base * K * V + rk[:, None] * V + rv[None, :], state)
    tok0 = tl.load(ctab_ptr + 2 * c).to(tl.int64)
    ln = tl.load(ctab_ptr + 2 * c + 1)
    kn = l2norm(_load_rows(k_ptr, tok0, ln, sk_t, 0, BT, K), 1)
    w = tl.load(w_ptr + base * BT * K + r[:, None] * K + rk[None, :])
    u = tl.load(u_ptr + base * BT * V + r[:, None] * V + rv[None, :])
    gc = tl.load(gc_ptr + base * BT + r)
    g_last = tl.sum(tl.where(r == BT - 1, gc, 0.0), 0)  # padded rows carry the last cumsum
    vn = u - tl.dot(w, state, input_precision=PREC)
    tl.store(u_ptr + base * BT * V + r[:, None] * V + rv[None, :], vn)
    kd = kn * tl.exp(g_last - gc)[:, None]
    return state * tl.exp(g_last) + tl.dot(tl.trans(kd), vn, input_precision=PREC)


@triton.jit
def _state_kernel(
    k_ptr, w_ptr, u_ptr, gc_ptr, h_ptr, s_ptr, ctab_ptr, stab_ptr, cu_ptr, slot_ptr, step_ptr,
    sk_t, sk_h, ss_s, ss_h, ss_k, step_stride,
    HV: tl.constexpr, REP: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, HAS_STEP: tl.constexpr, PREC: tl.constexpr, INTERP: tl.constexpr,
):  # fmt: skip
    i = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.load(stab_ptr + 3 * i)
    c0 = tl.load(stab_ptr + 3 * i + 1)
    nc = tl.load(stab_ptr + 3 * i + 2)
    slot = tl.load(slot_ptr + b)
    if HAS_STEP:
        n = tl.load(cu_ptr + b + 1) - tl.load(cu_ptr + b)
        dst = tl.load(step_ptr + b * step_stride + n - 1)
    else:
        dst = slot
    rk = tl.arange(0, K)
    rv = tl.program_id(2) * BV + tl.arange(0, BV)
    s_off = h * ss_h + rk[:, None] * ss_k + rv[None, :]
    state = tl.load(s_ptr + slot * ss_s + s_off)  # [K, BV] fp32
    kp = k_ptr + (h // REP) * sk_h
    if INTERP:  # the interpreter cannot range() over a loaded scalar; GPU builds keep a pipelined for loop
        c = c0
        while c < c0 + nc:
            state = _state_step(
                c, state, kp, w_ptr, u_ptr, gc_ptr, h_ptr, ctab_ptr, sk_t, h, rv, HV, K, V, BT, PREC
            )
            c += 1
    else:
        for c in range(c0, c0 + nc):
            state = _state_step(
                c, state, kp, w_ptr, u_ptr, gc_ptr, h_ptr, ctab_ptr, sk_t, h, rv, HV, K, V, BT, PREC
            )
    tl.store(s_ptr + dst * ss_s + s_off, state)


@triton.jit
def _out_kernel(
    q_ptr, k_ptr, u_ptr, gc_ptr, h_ptr, o_ptr, ctab_ptr,
    sq_t, sq_h, sk_t, sk_h, so_t, so_h, scale,
    HV: tl.constexpr, REP: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, PREC: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0)
    h = tl.program_id(1)
    tok0 = tl.load(ctab_ptr + 2 * c).to(tl.int64)
    ln = tl.load(ctab_ptr + 2 * c + 1)
    r = tl.arange(0, BT)
    rk = tl.arange(0, K)
    rv = tl.program_id(2) * BV + tl.arange(0, BV)
    base = c.to(tl.int64) * HV + h
    qn = l2norm(_load_rows(q_ptr + (h // REP) * sq_h, tok0, ln, sq_t, 0, BT, K), 1) * scale
    kn = l2norm(_load_rows(k_ptr + (h // REP) * sk_h, tok0, ln, sk_t, 0, BT, K), 1)
    gc = tl.load(gc_ptr + base * BT + r)
    s0 = tl.load(h_ptr + base * K * V + rk[:, None] * V + rv[None, :])  # state at the chunk start
    vn = tl.load(u_ptr + base * BT * V + r[:, None] * V + rv[None, :])  # deltas U, written by _state
    causal = r[:, None] >= r[None, :]
    att = tl.dot(qn, tl.trans(kn), input_precision=PREC) * tl.exp(
        tl.where(causal, gc[:, None] - gc[None, :], 0.0)
    )
    att = tl.where(causal, att, 0.0)
    o = tl.dot(qn * tl.exp(gc)[:, None], s0, input_precision=PREC) + tl.dot(att, vn, input_precision=PREC)
    o_dt: tl.constexpr = o_ptr.dtype.element_ty
    om = (r < ln)[:, None]
    tl.store(
        o_ptr + (tok0 + r)[:, None] * so_t + h * so_h + rv[None, :], round_to(o, o_dt, EMU).to(o_dt), mask=om
    )


def chunk_tables(q_lens: list[int], long_seqs: list[int], bt: int) -> tuple[list[int], list[int]]:
    """Host tables: per chunk (first token, length); per long sequence (seq, first chunk, chunk count)."""
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    ctab: list[int] = []
    stab: list[int] = []
    for b in long_seqs:
        n = q_lens[b]
        stab += [b, len(ctab) // 2, triton.cdiv(n, bt)]
        for t0 in range(0, n, bt):
            ctab += [starts[b] + t0, min(bt, n - t0)]
    return ctab, stab


def chunked_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    ssm_state: torch.Tensor, o: torch.Tensor, cu_q_lens: torch.Tensor, gdn_slots: torch.Tensor,
    step_slots: torch.Tensor | None, q_lens: list[int], long_seqs: list[int], cfg: dict,
) -> None:  # fmt: skip
    """Run the three chunked kernels over `long_seqs` (their state from / to their slot; in step mode the
    final state goes to step[b, n-1], which is the slot itself for a non-verify row)."""
    hk, kd = q.shape[1], q.shape[2]
    hv, vd = v.shape[1], v.shape[2]
    rep = hv // hk
    bt, sub, prec = cfg["BT"], min(16, cfg["BT"]), cfg["PREC"]
    if bt not in (16, 32, 64):  # the inverse's block series (I - F + F^2 - F^3) is exact for <= 4 blocks
        raise ValueError(f"chunk size must be 16, 32 or 64, got {bt}")
    ctab_l, stab_l = chunk_tables(q_lens, long_seqs, bt)
    tabs = torch.tensor(ctab_l + stab_l, dtype=torch.int32).to(q.device, non_blocking=True)
    ctab, stab = tabs[: len(ctab_l)], tabs[len(ctab_l) :]
    nc = len(ctab_l) // 2
    dev = q.device
    w = torch.empty(nc, hv, bt, kd, dtype=torch.float32, device=dev)
    u = torch.empty(nc, hv, bt, vd, dtype=torch.float32, device=dev)
    gc = torch.empty(nc, hv, bt, dtype=torch.float32, device=dev)
    hbuf = torch.empty(nc, hv, kd, vd, dtype=torch.float32, device=dev)
    _prep_kernel[(nc, hv)](
        k, v, g, beta, w, u, gc, ctab,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), g.stride(0), beta.stride(0),
        HV=hv, REP=rep, K=kd, V=vd, BT=bt, SUB=sub, PREC=prec, num_warps=cfg["prep_warps"],
    )  # fmt: skip
    step = step_slots if step_slots is not None else gdn_slots
    bvs = min(cfg["state_BV"], vd)
    _state_kernel[(len(long_seqs), hv, vd // bvs)](
        k, w, u, gc, hbuf, ssm_state, ctab, stab, cu_q_lens, gdn_slots, step,
        k.stride(0), k.stride(1), ssm_state.stride(0), ssm_state.stride(1), ssm_state.stride(2),
        step.stride(0) if step_slots is not None else 0,
        HV=hv, REP=rep, K=kd, V=vd, BT=bt, BV=bvs, HAS_STEP=step_slots is not None, PREC=prec,
        INTERP=interpreted(_state_kernel), num_warps=cfg["state_warps"], num_stages=cfg["state_stages"],
    )  # fmt: skip
    bvo = min(cfg["out_BV"], vd)
    _out_kernel[(nc, hv, vd // bvo)](
        q, k, u, gc, hbuf, o, ctab,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0), o.stride(1), kd**-0.5,
        HV=hv, REP=rep, K=kd, V=vd, BT=bt, BV=bvo, PREC=prec, EMU=interpreted(_out_kernel),
        num_warps=cfg["out_warps"],
    )  # fmt: skip
