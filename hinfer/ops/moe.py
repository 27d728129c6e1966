"""Mixture of experts: softmax router with renormalised top-k, SwiGLU experts stored fused [E, 2I, H] / [E, H, I].

The experts are plain tensors or quantized expert objects (hinfer.quant.experts.Int4ExpertsWeight /
Fp8ExpertsWeight: logical `.shape` [E, N, K], `.expert(e)` one expert as an Int4Weight / Fp8Weight,
`.kernel_experts()` the grouped kernels' view of them or None). Quantized
experts run the grouped Triton kernels when Triton runs (bf16 activations; int4 groups of 128, fp8 per-channel
or 128x128 block scales), else the reference body, which dequantizes one expert at a time (never the whole
[E, N, K] tensor) and computes in fp32, rounded once: the kernels' semantics.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hinfer.ops.dispatch import use_triton, warn_fallback


def moe_route_ref(router_logits: torch.Tensor, top_k: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (weights [T, k] in the logits' dtype, expert ids [T, k] int64). `shared`: the last column is the gate
    logit of a shared expert folded in as expert E (hinfer.model.shared_expert_fold): it is left out of the
    softmax and becomes slot k, weight sigmoid(logit), id E."""
    logits = router_logits[:, :-1] if shared else router_logits
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    top_w, top_i = torch.topk(probs, top_k, dim=-1)
    top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(router_logits.dtype)
    if shared:
        e = logits.shape[1]
        top_w = torch.cat([top_w, torch.sigmoid(router_logits[:, e:])], dim=1)
        top_i = torch.cat([top_i, torch.full_like(top_i[:, :1], e)], dim=1)
    return top_w, top_i


def _expert(w, e: int) -> torch.Tensor:
    """Expert e's [N, K] weight: a view of a plain tensor, or a quantized expert dequantized (alone) to fp32."""
    return w[e] if isinstance(w, torch.Tensor) else w.expert(e).dequantize(torch.float32)


def moe_experts_ref(
    x: torch.Tensor,  # [T, H]
    w_gate_up,  # [E, 2I, H]: a tensor or quantized experts
    w_down,  # [E, H, I]: a tensor or quantized experts
    top_w: torch.Tensor,  # [T, k]
    top_i: torch.Tensor,  # [T, k]
) -> torch.Tensor:
    if not (isinstance(w_gate_up, torch.Tensor) and isinstance(w_down, torch.Tensor)):
        # quantized: fp32 products and sums against each used expert dequantized on the fly, rounded once
        return _experts_ref(x.float(), w_gate_up, w_down, top_w.float(), top_i).to(x.dtype)
    return _experts_ref(x, w_gate_up, w_down, top_w, top_i)


def _experts_ref(x, w_gate_up, w_down, top_w, top_i) -> torch.Tensor:
    out = torch.zeros_like(x)
    for e in torch.unique(top_i).tolist():
        tok, slot = torch.where(top_i == e)
        h = F.linear(x[tok], _expert(w_gate_up, e))
        g, u = h.chunk(2, dim=-1)
        y = F.linear(F.silu(g) * u, _expert(w_down, e)) * top_w[tok, slot, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


def moe_route(router_logits: torch.Tensor, top_k: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(router_logits):
        from hinfer.ops.triton import moe as tm

        return tm.moe_route(router_logits, top_k, shared)
    return moe_route_ref(router_logits, top_k, shared)


def _kernel_weight(w, x: torch.Tensor):
    """What the Triton twin takes for `w` (the tensor itself, or an Int4Experts / Fp8Experts view of quantized
    experts), or None when only the reference body can run it."""
    if isinstance(w, torch.Tensor):
        return w
    return w.kernel_experts() if x.dtype == torch.bfloat16 else None


def _kind(w) -> type:
    return torch.Tensor if isinstance(w, torch.Tensor) else type(w)


def moe_experts(x: torch.Tensor, w_gate_up, w_down, top_w: torch.Tensor, top_i: torch.Tensor,
                slots: bool = False) -> torch.Tensor:  # fmt: skip
    """The experts' weighted sum [T, H]; with `slots` a kernel path may instead hand back each token's k weighted
    expert rows [T, k, H] unsummed, for the next add + norm to sum (hinfer.ops.norm.add_rms_norm; the `norm_slots`
    launch fusion), where summing them would take a launch of its own or the tail of the down launch."""
    if use_triton(x):
        gu, dn = _kernel_weight(w_gate_up, x), _kernel_weight(w_down, x)
        if gu is not None and dn is not None and _kind(gu) is _kind(dn):
            from hinfer.ops.triton import moe as tm

            return tm.moe_experts(x, gu, dn, top_w, top_i, slots=slots)
        if x.is_cuda:
            warn_fallback("moe_experts", f"no kernel for {_describe(w_gate_up)} / {_describe(w_down)} experts "
                          f"with {x.dtype} activations")
    return moe_experts_ref(x, w_gate_up, w_down, top_w, top_i)


def moe_route_experts(x: torch.Tensor, router_logits: torch.Tensor, w_gate_up, w_down, top_k: int,
                      shared: bool = False, slots: bool = False) -> torch.Tensor:  # fmt: skip
    """moe_experts over moe_route's choice, as one op: the Triton twin may route in the experts' first launch.
    `slots`: as moe_experts'."""
    if use_triton(x):
        gu, dn = _kernel_weight(w_gate_up, x), _kernel_weight(w_down, x)
        if gu is not None and dn is not None and _kind(gu) is _kind(dn):
            from hinfer.ops.triton import moe as tm

            return tm.moe_route_experts(x, router_logits, gu, dn, top_k, shared, slots=slots)
    top_w, top_i = moe_route(router_logits, top_k, shared)
    return moe_experts(x, w_gate_up, w_down, top_w, top_i, slots=slots)


def _describe(w) -> str:
    return str(w.dtype) if isinstance(w, torch.Tensor) else w.extra_repr()
