"""Triton gated delta rule for short sequences (decode and speculative verify): the hot decode kernel.

Grid (sequence, value head, V block). Each program holds a [K, BV] column block of its head's fp32 state in
registers for all of the sequence's tokens: the state is read once and written once (or once per token in
verify mode), which is all the memory traffic there is. Splitting V over programs is what makes a single
decode step fill the GPU: 48 heads x V/BV blocks (BV=16 -> 384 programs on 132 SMs at C=1). Rows of K are
whole in each program, so both reductions over K (S^T k and S^T q) stay inside one program.
Sequences longer than `max_n` are skipped here (the chunked kernels handle them).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.ops.triton.common import interpreted
from hinfer.ops.triton.gdn_common import delta_rule_step, store_token


@triton.jit
def _recurrent_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, cu_ptr, slot_ptr, step_ptr,
    sq_t, sq_h, sk_t, sk_h, sv_t, sv_h, sg_t, sb_t, so_t, so_h, ss_s, ss_h, ss_k, step_stride,
    max_n, scale,
    REP: tl.constexpr, K: tl.constexpr, BV: tl.constexpr, HAS_STEP: tl.constexpr, EMU: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    h = tl.program_id(1)
    slot = tl.load(slot_ptr + b)  # issued with the cu loads: the state address waits on one round trip only
    start = tl.load(cu_ptr + b).to(tl.int64)
    n = tl.load(cu_ptr + b + 1).to(tl.int64) - start
    if n > max_n:
        return
    hk = h // REP
    rk = tl.arange(0, K)
    rv = tl.program_id(2) * BV + tl.arange(0, BV)
    s_off = h * ss_h + rk[:, None] * ss_k + rv[None, :]
    state = tl.load(s_ptr + slot * ss_s + s_off)  # [K, BV] fp32, coalesced along V
    j = n - n
    while j < n:  # a while loop: Triton's interpreter cannot range() over a loaded scalar
        t = start + j
        q = tl.load(q_ptr + t * sq_t + hk * sq_h + rk).to(tl.float32)
        k = tl.load(k_ptr + t * sk_t + hk * sk_h + rk).to(tl.float32)
        v = tl.load(v_ptr + t * sv_t + h * sv_h + rv).to(tl.float32)
        g = tl.load(g_ptr + t * sg_t + h)
        beta = tl.load(beta_ptr + t * sb_t + h)
        state, o = delta_rule_step(state, q, k, v, g, beta, scale)
        store_token(o_ptr + t * so_t + h * so_h + rv, o, state, s_ptr, s_off, ss_s, step_ptr, step_stride, b, j, n,
                    HAS_STEP, EMU)  # fmt: skip
        j += 1
    if not HAS_STEP:
        tl.store(s_ptr + slot * ss_s + s_off, state)


def recurrent_launch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    ssm_state: torch.Tensor, o: torch.Tensor, cu_q_lens: torch.Tensor, gdn_slots: torch.Tensor,
    step_slots: torch.Tensor | None, num_seqs: int, max_n: int, bv: int, num_warps: int,
) -> None:  # fmt: skip
    hk, kd = q.shape[1], q.shape[2]
    hv, vd = v.shape[1], v.shape[2]
    bv = min(bv, vd)
    if vd % bv or ssm_state.stride(-1) != 1 or ssm_state.shape[-2:] != (kd, vd):
        raise ValueError("gated_delta_rule: state must be [S, HV, K, V] with unit V stride, V % BV == 0")
    step = step_slots if step_slots is not None else gdn_slots
    _recurrent_kernel[(num_seqs, hv, vd // bv)](
        q, k, v, g, beta, ssm_state, o, cu_q_lens, gdn_slots, step,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), g.stride(0),
        beta.stride(0), o.stride(0), o.stride(1), ssm_state.stride(0), ssm_state.stride(1),
        ssm_state.stride(2), step.stride(0) if step_slots is not None else 0,
        max_n, kd**-0.5,
        REP=hv // hk, K=kd, BV=bv, HAS_STEP=step_slots is not None, EMU=interpreted(_recurrent_kernel),
        num_warps=num_warps,
    )  # fmt: skip
