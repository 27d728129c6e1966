"""Triton: the sampler's candidate path after its top-k, one launch instead of about twenty.

Rows with 0 < top_k <= 256 sample among their 256 largest logits (engine/sampler.py `_sample_candidates`): keep
the top_k largest (ties at the boundary kept), then top_p on their softmax (the shortest prefix whose mass reaches
p, and every logit tied with its last), then min_p, then the exponential race: the argmax of logit + Gumbel noise,
the noise a pure function of (the row's key, the token id) through splitmix64 and a double log in float64. One
program per row does all of it over the row's 256 candidates; the reference is the torch body it replaces.

The noise is bit for bit the reference's. top_p's softmax and running sum are float reductions in another order
than torch's, so a logit whose running mass lies within rounding of p may fall on the other side: the sampled
distribution is the same, a row's token can differ from the torch body's in such a case.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

GAMMA = tl.constexpr(0x9E3779B97F4A7C15)  # splitmix64's increment and multipliers (engine/sampler.py)
MIX1 = tl.constexpr(0xBF58476D1CE4E5B9)
MIX2 = tl.constexpr(0x94D049BB133111EB)


@triton.jit
def _mix64(x):
    """splitmix64's finalizer on uint64 (multiplies wrap)."""
    x = (x ^ (x >> 30)) * MIX1
    x = (x ^ (x >> 27)) * MIX2
    return x ^ (x >> 31)


@triton.jit
def _candidates_kernel(vals_ptr, ids_ptr, keys_ptr, topk_ptr, topp_ptr, minp_ptr, out_ptr, W,
                       BLOCK: tl.constexpr, TOP_P: tl.constexpr, MIN_P: tl.constexpr, draft_ptr=None, u_ptr=None,
                       acc_ptr=None, SPEC: tl.constexpr = False):  # fmt: skip
    b = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < W
    row = b.to(tl.int64) * W
    v = tl.load(vals_ptr + row + cols, mask=ok, other=float("-inf"))  # sorted descending
    ids = tl.load(ids_ptr + row + cols, mask=ok, other=0)
    k = tl.minimum(tl.load(topk_ptr + b), W)
    kth = tl.max(tl.where(cols == k - 1, v, float("-inf")), axis=0)
    v = tl.where(v >= kth, v, float("-inf"))
    if TOP_P:
        top_p = tl.load(topp_ptr + b)
        e = tl.exp(v - tl.max(v, axis=0))
        probs = e / tl.sum(e, axis=0)
        before = tl.cumsum(probs, axis=0) - probs  # mass strictly before each candidate
        keep = tl.maximum(tl.sum((before < top_p).to(tl.int32), axis=0), 1)
        last = tl.max(tl.where(cols == keep - 1, v, float("-inf")), axis=0)
        thr = tl.where(top_p < 1.0, last, float("-inf"))
        v = tl.where(v >= thr, v, float("-inf"))
    if MIN_P:
        v = tl.where(v - tl.max(v, axis=0) >= tl.load(minp_ptr + b), v, float("-inf"))
    if SPEC:  # a verified row (engine/spec/picks.py): its draft accepted with probability p(draft), else the residual
        d = tl.load(draft_ptr + b)
        e = tl.exp(v - tl.max(v, axis=0))
        p_draft = tl.sum(tl.where(ok & (ids == d), e, 0.0), axis=0) / tl.sum(e, axis=0)
        accepted = (tl.load(u_ptr + b) < p_draft.to(tl.float64)) & (d >= 0)
        v = tl.where(ids == d, float("-inf"), v)  # max(0, p - q) with q one-point at the draft
    key = tl.load(keys_ptr + b).to(tl.uint64, bitcast=True)
    x = _mix64(key + (ids + 1).to(tl.uint64, bitcast=True) * GAMMA)
    u = ((x >> 11).to(tl.float64) + 0.5) * 1.1102230246251565e-16  # the top 53 bits: exact, in (0, 1)
    noise = (-tl.log(-tl.log(u))).to(tl.float32)
    choice = tl.argmax(tl.where(ok, v + noise, float("-inf")), axis=0)
    drawn = tl.sum(tl.where(cols == choice, ids, 0), axis=0)
    if SPEC:
        tl.store(out_ptr + b, tl.where(accepted, d, drawn))
        tl.store(acc_ptr + b, accepted.to(tl.int8))
    else:
        tl.store(out_ptr + b, drawn)


def sample_candidates(vals: torch.Tensor, ids: torch.Tensor, keys: torch.Tensor, top_k: torch.Tensor,
                      top_p: torch.Tensor, log_min_p: torch.Tensor, any_top_p: bool,
                      any_min_p: bool) -> torch.Tensor:  # fmt: skip
    """vals [B, W] fp32 (a row's W largest logits after temperature, descending), ids [B, W] int64 (their token
    ids), keys [B] int64, top_k [B] int64 (>= 1), top_p and log_min_p [B] or [B, 1] fp32 -> token ids [B]
    int64. any_top_p / any_min_p: whether some row filters that way (else the step is skipped)."""
    b, w = vals.shape
    out = torch.empty(b, dtype=torch.int64, device=vals.device)
    flat = [t.reshape(-1).contiguous() for t in (keys, top_k, top_p, log_min_p)]
    _candidates_kernel[(b,)](vals.contiguous(), ids.contiguous(), *flat, out, w, BLOCK=triton.next_power_of_2(w),
                             TOP_P=any_top_p, MIN_P=any_min_p, num_warps=4)  # fmt: skip
    return out


def judge_candidates(vals: torch.Tensor, ids: torch.Tensor, keys: torch.Tensor, top_k: torch.Tensor,
                     top_p: torch.Tensor, log_min_p: torch.Tensor, any_top_p: bool, any_min_p: bool,
                     drafts: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """engine/spec/picks.py's rows in one launch: as sample_candidates, with drafts [B] int64 (-1: none) and u [B]
    float64 (the acceptance uniforms) -> (each row's draft where accepted, else the race without it [B] int64;
    accepted [B] bool). The race is over the filtered logits (the torch body races over their log-softmax: the
    same argmax up to rounding)."""
    b, w = vals.shape
    out = torch.empty(b, dtype=torch.int64, device=vals.device)
    acc = torch.empty(b, dtype=torch.int8, device=vals.device)
    flat = [t.reshape(-1).contiguous() for t in (keys, top_k, top_p, log_min_p)]
    _candidates_kernel[(b,)](vals.contiguous(), ids.contiguous(), *flat, out, w, BLOCK=triton.next_power_of_2(w),
                             TOP_P=any_top_p, MIN_P=any_min_p, draft_ptr=drafts.contiguous(), u_ptr=u.contiguous(),
                             acc_ptr=acc, SPEC=True, num_warps=4)  # fmt: skip
    return out, acc.bool()
