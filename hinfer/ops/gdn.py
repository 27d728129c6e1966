"""Gated DeltaNet: causal depthwise conv1d with per-slot state, gating, and the gated delta rule.

Per value head h (key head h // (HV/HK)), fp32 state S [K, V]:
    S = S * exp(g);  S += k (x) beta * (v - S^T k);  o = S^T q
with q, k l2-normalised and q scaled by 1/sqrt(K). State lives in slots of ModelState; each sequence reads
`gdn_slots[b]` and writes it back. With `gdn_step_slots` (speculative verify) the state after new token j is
written to `gdn_step_slots[b, j]` instead, so a rejected draft leaves the current slot untouched.
With `gdn_split` (a prefix-cache checkpoint inside a prompt chunk) the state after token j of a sequence is
also copied into a save slot.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinfer.batch import ForwardBatch
from hinfer.ops.dispatch import use_triton
from hinfer.ops.norm import gated_rms_norm_ref


def _seq_spans(batch: ForwardBatch) -> list[tuple[int, int, int]]:
    """(start, end, slot) per sequence, from host mirrors (no device sync on the hot path)."""
    slots = batch.gdn_slots.tolist()
    spans, start = [], 0
    for b, n in enumerate(batch.q_lens_cpu):
        spans.append((start, start + n, slots[b]))
        start += n
    return spans


def causal_conv1d_ref(
    x: torch.Tensor,  # [T, C]
    weight: torch.Tensor,  # [C, W]
    conv_state: torch.Tensor,  # [S, C, W-1] one layer
    batch: ForwardBatch,
) -> torch.Tensor:
    """y = silu(depthwise causal conv over [state | x]); the state keeps the last W-1 inputs of each sequence."""
    w = weight.shape[1]
    out = torch.empty_like(x)
    step = batch.gdn_step_slots.tolist() if batch.gdn_step_slots is not None else None
    for b, (s, e, slot) in enumerate(_seq_spans(batch)):
        window = torch.cat([conv_state[slot].to(x.dtype), x[s:e].t()], dim=1)  # [C, W-1+n]
        y = F.conv1d(window[None].to(weight.dtype), weight[:, None, :], groups=weight.shape[0])[0]  # [C, n]
        out[s:e] = F.silu(y).t().to(x.dtype)
        if step is None:
            conv_state[slot] = window[:, -(w - 1) :].to(conv_state.dtype)
        else:
            for j in range(e - s):
                conv_state[step[b][j]] = window[:, j + 1 : j + w].to(conv_state.dtype)
    return out


def gdn_gating_ref(
    a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """g = -exp(A_log) * softplus(a + dt_bias) (fp32), beta = sigmoid(b) (in the model dtype, then fp32)."""
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g, b.sigmoid().float()


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_delta_rule_ref(
    q: torch.Tensor,  # [T, HK, K]
    k: torch.Tensor,  # [T, HK, K]
    v: torch.Tensor,  # [T, HV, V]
    g: torch.Tensor,  # [T, HV] fp32
    beta: torch.Tensor,  # [T, HV] fp32
    ssm_state: torch.Tensor,  # [S, HV, K, V] fp32, one layer
    batch: ForwardBatch,
) -> torch.Tensor:
    hv, hk = v.shape[1], q.shape[1]
    rep = hv // hk
    qf = l2norm(q.float()).repeat_interleave(rep, dim=1) * (q.shape[-1] ** -0.5)
    kf = l2norm(k.float()).repeat_interleave(rep, dim=1)
    vf = v.float()
    out = torch.empty_like(vf)
    step = batch.gdn_step_slots.tolist() if batch.gdn_step_slots is not None else None
    for bi, (s, e, slot) in enumerate(_seq_spans(batch)):
        state = ssm_state[slot].clone()  # [HV, K, V]
        for t in range(s, e):
            state = state * g[t].exp()[:, None, None]
            kv_mem = torch.einsum("hkv,hk->hv", state, kf[t])
            delta = (vf[t] - kv_mem) * beta[t][:, None]
            state = state + kf[t][:, :, None] * delta[:, None, :]
            out[t] = torch.einsum("hkv,hk->hv", state, qf[t])
            if step is not None:
                ssm_state[step[bi][t - s]] = state
        if step is None:
            ssm_state[slot] = state
    return out.to(v.dtype)


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
    if use_triton(x):
        from hinfer.ops.triton import gdn as tg

        return tg.causal_conv1d(x, weight, conv_state, batch)
    return causal_conv1d_ref(x, weight, conv_state, batch)


def gdn_gating(
    a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(a):
        from hinfer.ops.triton import gdn as tg

        return tg.gdn_gating(a, b, a_log, dt_bias)
    return gdn_gating_ref(a, b, a_log, dt_bias)


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    ssm_state: torch.Tensor,
    batch: ForwardBatch,
) -> torch.Tensor:
    if use_triton(q):
        from hinfer.ops.triton import gdn as tg

        return tg.gated_delta_rule(q, k, v, g, beta, ssm_state, batch)
    return gated_delta_rule_ref(q, k, v, g, beta, ssm_state, batch)


def gated_delta_net_ref(
    qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, z: torch.Tensor, a_log: torch.Tensor,
    dt_bias: torch.Tensor, conv_weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
    conv_state: torch.Tensor, ssm_state: torch.Tensor, batch: ForwardBatch, heads: tuple[int, int, int, int],
) -> torch.Tensor:  # fmt: skip
    hk, kd, hv, vd = heads
    t = qkv.shape[0]
    qkv = causal_conv1d_ref(qkv, conv_weight, conv_state, batch)
    q, k, v = qkv.split([hk * kd, hk * kd, hv * vd], dim=-1)
    g, beta = gdn_gating_ref(a, b, a_log, dt_bias)
    o = gated_delta_rule_ref(q.view(t, hk, kd), k.view(t, hk, kd), v.view(t, hv, vd), g, beta, ssm_state, batch)
    return gated_rms_norm_ref(o, z, norm_weight, eps)


def gated_delta_net(
    qkv: torch.Tensor,  # [T, 2 HK K + HV V]: q, k, v before the conv
    a: torch.Tensor,  # [T, HV]
    b: torch.Tensor,  # [T, HV]
    z: torch.Tensor,  # [T, HV, V] the output gate
    a_log: torch.Tensor,  # [HV]
    dt_bias: torch.Tensor,  # [HV]
    conv_weight: torch.Tensor,  # [C, W]
    norm_weight: torch.Tensor,  # [V]
    eps: float,
    conv_state: torch.Tensor,  # [S, C, W-1] one layer
    ssm_state: torch.Tensor,  # [S, HV, K, V] fp32, one layer
    batch: ForwardBatch,
    heads: tuple[int, int, int, int],  # HK, K, HV, V
) -> torch.Tensor:
    """The Gated DeltaNet mixer between in_proj and out_proj: q, k, v = silu(causal_conv1d(qkv)); g, beta =
    gdn_gating(a, b); o = gated_delta_rule(q, k, v, g, beta); gated_rms_norm(o, z) [T, HV, V]. The Triton twin
    runs it as one kernel when every sequence is short (decode, speculative verify). A batch with state saves
    (ForwardBatch.gdn_split) runs in two passes, the states copied out between them."""
    if batch.gdn_split is not None:
        return _gated_delta_net_saving(qkv, a, b, z, a_log, dt_bias, conv_weight, norm_weight, eps, conv_state,
                                       ssm_state, batch, heads)  # fmt: skip
    if use_triton(qkv):
        from hinfer.ops.triton import gdn as tg

        return tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_weight, norm_weight, eps, conv_state,
                                  ssm_state, batch, heads)  # fmt: skip
    return gated_delta_net_ref(qkv, a, b, z, a_log, dt_bias, conv_weight, norm_weight, eps, conv_state, ssm_state,
                               batch, heads)  # fmt: skip


def _gated_delta_net_saving(
    qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, z: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
    conv_weight: torch.Tensor, norm_weight: torch.Tensor, eps: float, conv_state: torch.Tensor,
    ssm_state: torch.Tensor, batch: ForwardBatch, heads: tuple[int, int, int, int],
) -> torch.Tensor:  # fmt: skip
    """gated_delta_net with the state after token j of a sequence also copied into a save slot (ForwardBatch's
    GdnSplit): the first pass, the conv and recurrent states of the saved sequences copied into their save
    slots, the second pass."""
    split = batch.gdn_split

    def run(part: ForwardBatch, rows: slice | torch.Tensor) -> torch.Tensor:
        return gated_delta_net(qkv[rows], a[rows], b[rows], z[rows], a_log, dt_bias, conv_weight, norm_weight, eps,
                               conv_state, ssm_state, part, heads)  # fmt: skip

    o_first = run(split.first, split.first_rows)
    conv_state[split.dst] = conv_state[split.src]
    ssm_state[split.dst] = ssm_state[split.src]
    o_second = run(split.second, split.second_rows)
    out = o_first.new_empty((qkv.shape[0], *o_first.shape[1:]))
    out[split.first_rows] = o_first
    out[split.second_rows] = o_second
    return out
