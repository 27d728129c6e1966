"""Helpers shared by the Gated DeltaNet Triton kernels."""

from __future__ import annotations

import triton
import triton.language as tl

from hinfer.ops.triton.common import round_to


@triton.jit
def l2norm(x, AXIS: tl.constexpr):
    """fp32 x * rsqrt(sum(x^2) + 1e-6) along AXIS (the last one), as hinfer.ops.gdn.l2norm."""
    return x * tl.rsqrt(tl.sum(x * x, axis=AXIS, keep_dims=True) + 1e-6)


@triton.jit
def delta_rule_step(state, q, k, v, g, beta, scale):
    """One token of the gated delta rule on a [K, BV] fp32 state block: q, k ([K], l2-normalised here, q scaled),
    v [BV], the token's g and beta -> (new state, o [BV])."""
    q = l2norm(q, 0) * scale
    k = l2norm(k, 0)
    state = state * tl.exp(g)
    # both reductions over K read the decayed state, so they run side by side:
    # o = (S + k delta^T)^T q = S^T q + (k.q) delta
    kv = tl.sum(state * k[:, None], axis=0)
    sq = tl.sum(state * q[:, None], axis=0)
    delta = (v - kv) * beta
    state = state + k[:, None] * delta[None, :]
    return state, sq + tl.sum(k * q, axis=0) * delta


@triton.jit
def gates(a, b, neg_a, dtb, B_DT: tl.constexpr, EMU: tl.constexpr):
    """g = -exp(A_log) softplus(a + dt_bias) (neg_a = -exp(A_log); torch's softplus threshold 20, log1p(e)
    computed accurately as log(u) * e / (u - 1)) and beta = sigmoid(b) rounded to b's dtype; fp32 a, b."""
    x = a + dtb
    e = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + e
    lp = tl.where(u == 1.0, e, tl.log(u) * (e / tl.where(u == 1.0, 1.0, u - 1.0)))
    g = neg_a * tl.where(x > 20.0, x, lp)
    beta = round_to(1.0 / (1.0 + tl.exp(-b)), B_DT, EMU)
    return g, beta


@triton.jit
def store_token(o_ptrs, o, state, s_ptr, s_off, ss_s, step_ptr, step_stride, b, j, n, HAS_STEP: tl.constexpr,
                EMU: tl.constexpr):  # fmt: skip
    """Token j's output row (rounded to o's dtype) and, with step slots, the state after it to step[b, j]; a run of
    equal slots (a non-verify row in a verify batch) keeps only its last write."""
    o_dt: tl.constexpr = o_ptrs.dtype.element_ty
    tl.store(o_ptrs, round_to(o, o_dt, EMU).to(o_dt))
    if HAS_STEP:
        dst = tl.load(step_ptr + b * step_stride + j)
        nxt = tl.load(step_ptr + b * step_stride + j + 1, mask=j + 1 < n, other=-1)
        if (j == n - 1) | (dst != nxt):
            tl.store(s_ptr + dst * ss_s + s_off, state)
